"""on_tty.py CMD ARGS... -- run CMD with a pseudo-terminal as its standard output and error,
print what it wrote and then "exit N" (its exit status). For tests of terminal-only behaviour.
(Not a test: lit skips Inputs/.)"""
import os
import pty
import sys

pid, fd = pty.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
out = b""
while True:
    try:
        chunk = os.read(fd, 4096)
    except OSError:  # the child closed the terminal
        break
    if not chunk:
        break
    out += chunk
_, status = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace").replace("\r\n", "\n"))
print("exit %d" % os.waitstatus_to_exitcode(status))
