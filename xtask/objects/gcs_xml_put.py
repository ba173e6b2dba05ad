"""A front for fake-gcs-server that gives it the one XML API call it lacks (`cargo xtask objects`).

object_store's Google Cloud Storage client writes with the XML API's object PUT
(`PUT /<bucket>/<object>`, a create-only or compare-and-swap one with `x-goog-if-generation-match`),
which fake-gcs-server 1.54 answers `400 invalid uploadType` (its issue #331, open; object_store's
own CI runs a fork with the XML API). This front turns each such PUT into the JSON API's
multipart upload of the same bytes, its precondition as `ifGenerationMatch` (which the emulator
honours: 412 when it does not hold), and answers as the XML API does: no body, the object's
`ETag` and `x-goog-generation`. Every other request (GET, HEAD, the XML listing, DELETE) goes to
the emulator as it came, and its answer back as it was.

Usage: gcs_xml_put.py <listen port> <emulator port>
"""

import http.client
import http.server
import json
import sys
import urllib.parse
from xml.sax.saxutils import escape

LISTEN, TARGET = int(sys.argv[1]), int(sys.argv[2])
BOUNDARY = "ember-gcs-xml-put"


def upload_request(path, headers, body):
    """The JSON API's multipart upload that stores `body` as the XML PUT at `path` would."""
    bucket, _, name = path.lstrip("/").partition("/")
    query = {"uploadType": "multipart"}
    generation = headers.get("x-goog-if-generation-match")
    if generation is not None:
        query["ifGenerationMatch"] = generation
    metadata = {"name": urllib.parse.unquote(name)}
    content_type = headers.get("content-type", "application/octet-stream")
    if content_type:
        metadata["contentType"] = content_type
    multipart = b"".join([
        f"--{BOUNDARY}\r\nContent-Type: application/json\r\n\r\n".encode(),
        json.dumps(metadata).encode(),
        f"\r\n--{BOUNDARY}\r\nContent-Type: {content_type}\r\n\r\n".encode(),
        body,
        f"\r\n--{BOUNDARY}--\r\n".encode(),
    ])
    target = f"/upload/storage/v1/b/{bucket}/o?{urllib.parse.urlencode(query)}"
    return target, {"Content-Type": f"multipart/related; boundary={BOUNDARY}"}, multipart


class Front(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def body(self):
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def forward(self, method, target, headers, body):
        connection = http.client.HTTPConnection("127.0.0.1", TARGET, timeout=120)
        try:
            connection.request(method, target, body=body, headers=headers)
            answer = connection.getresponse()
            return answer.status, answer.getheaders(), answer.read()
        finally:
            connection.close()

    def reply(self, status, headers, body, head=False):
        self.send_response(status)
        for name, value in headers:
            if name.lower() not in ("content-length", "transfer-encoding", "connection", "date"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def passed_on(self):
        # The emulator routes the XML API by the Host it was started for: the one it is reached at.
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "host")}
        status, answer, body = self.forward(self.command, self.path, headers, self.body())
        self.reply(status, answer, body, head=self.command == "HEAD")

    do_GET = do_HEAD = do_DELETE = do_POST = passed_on

    def do_PUT(self):
        path = urllib.parse.urlsplit(self.path).path
        if "x-goog-copy-source" in self.headers or path.count("/") < 2:
            return self.passed_on()
        headers = {k.lower(): v for k, v in self.headers.items()}
        target, upload_headers, body = upload_request(path, headers, self.body())
        status, answer, text = self.forward("POST", target, upload_headers, body)
        if status != 200:
            code = "PreconditionFailed" if status == 412 else "Error"
            xml = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>" \
                  f"<Message>{escape(text.decode(errors='replace')[:300])}</Message></Error>"
            return self.reply(status, [("Content-Type", "application/xml")], xml.encode())
        stored = json.loads(text)
        self.reply(200, [("ETag", f'"{stored["etag"]}"'),
                         ("x-goog-generation", stored["generation"]),
                         ("x-goog-metageneration", stored.get("metageneration", "1"))], b"")


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", LISTEN), Front)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
