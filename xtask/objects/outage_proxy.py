"""A TCP proxy between ember and the S3 server that can take the server away (`cargo xtask
objects`): while the file named by `--down` exists, every connection is cut and new ones are
refused, as when a store's endpoint goes down; when the file is removed, it forwards again.

Usage: outage_proxy.py <listen port> <target port> <down flag file>
"""

import os
import socket
import sys
import threading

LISTEN, TARGET, DOWN = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
open_connections = set()
lock = threading.Lock()


def down():
    return os.path.exists(DOWN)


def pump(source, sink, pair):
    try:
        while True:
            if down():
                print("cut a connection while down", flush=True)
                break
            try:
                data = source.recv(65536)
            except socket.timeout:
                continue
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in pair:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def main():
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", LISTEN))
    server.listen(64)
    while True:
        client, _ = server.accept()
        if down():
            print("refused a connection while down", flush=True)
            client.close()
            continue
        try:
            upstream = socket.create_connection(("127.0.0.1", TARGET))
        except OSError:
            client.close()
            continue
        for s in (client, upstream):
            s.settimeout(0.2)
        pair = (client, upstream)
        threading.Thread(target=pump, args=(client, upstream, pair), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client, pair), daemon=True).start()


if __name__ == "__main__":
    main()
