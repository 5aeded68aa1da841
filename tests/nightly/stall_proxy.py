#!/usr/bin/env python3
"""A TCP proxy to a PostgreSQL unix socket that freezes a connection mid-run.

Forwards both ways until the client sends TRIGGER (bytes of an SQL text, e.g. "INSERT INTO
result"); from then on that connection is silent in both directions but stays open, as a
server stopped with SIGSTOP looks to its clients. When the client gives up and closes, the
server side is closed too, so the frozen transaction rolls back and blocks nobody.

  stall_proxy.py PORT_FILE UNIX_SOCKET TRIGGER
"""
import select
import socket
import sys
import threading


def serve(client, unix_path, trigger):
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.connect(unix_path)
    seen = b""
    stalled = False
    try:
        while True:
            readable, _, _ = select.select([client] if stalled else [client, server], [], [])
            if client in readable:
                data = client.recv(65536)
                if not data:
                    return
                if stalled:
                    continue
                seen = (seen + data)[-65536:]
                if trigger in seen:
                    stalled = True  # swallow it: the server never sees the statement
                    continue
                server.sendall(data)
            if server in readable:
                data = server.recv(65536)
                if not data:
                    return
                client.sendall(data)
    except OSError:
        return
    finally:
        client.close()
        server.close()


def main():
    port_file, unix_path, trigger = sys.argv[1], sys.argv[2], sys.argv[3].encode()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(listener.getsockname()[1]))
    import os
    os.rename(port_file + ".tmp", port_file)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=serve, args=(client, unix_path, trigger), daemon=True).start()


if __name__ == "__main__":
    main()
