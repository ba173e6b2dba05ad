"""A TCP proxy between a client and the S3 server that can take the server away (`cargo xtask
objects`): while the down flag file exists, every connection is cut and new ones are refused,
as when a store's endpoint goes down; when the file is removed, it forwards again. With a
count file, it also counts the bytes clients send (requests, headers and bodies: what an
upload costs on the wire) and writes the total there every 50 ms (`cargo xtask objects --bench`).

Usage: outage_proxy.py <listen port> <target port> <down flag file> [<count file>]
"""

import os
import socket
import sys
import threading
import time

LISTEN, TARGET, DOWN = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
COUNT = sys.argv[4] if len(sys.argv) > 4 else None
sent = [0]
lock = threading.Lock()


def down():
    return os.path.exists(DOWN)


def write_count():
    while True:
        time.sleep(0.05)
        with lock:
            total = sent[0]
        with open(COUNT + ".tmp", "w") as f:
            f.write(str(total))
        os.replace(COUNT + ".tmp", COUNT)


def pump(source, sink, pair, upstream):
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
            if upstream:
                with lock:
                    sent[0] += len(data)
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
    if COUNT:
        threading.Thread(target=write_count, daemon=True).start()
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
        threading.Thread(target=pump, args=(client, upstream, pair, True), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client, pair, False), daemon=True).start()


if __name__ == "__main__":
    main()
