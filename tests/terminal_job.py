"""A job-control shell for one command, run as the session leader of a pty by ``tests.terminal``.

It does for its one command what an interactive shell does for a command typed at its prompt: the
command gets a process group of its own and is made the terminal's foreground process group, so
Ctrl-C typed on the terminal (the driver's SIGINT) reaches the command and every process of its
group, and nothing else. The shell itself ignores the keyboard's signals, outlives the command
(its children are not hung up when the command ends, as they would be if the command were the
session leader) and writes how it ended: the exit code as a shell's ``$?`` shows it (128 + the
signal's number when a signal ended it) and the moment (``time.monotonic``: the same clock in every
process of the machine).

Usage: ``python terminal_job.py STATUS_FILE -- COMMAND [ARG ...]``; ``STATUS_FILE.pid`` gets the
command's pid as soon as it is started.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

KEYBOARD_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)
# what the command gets back to default (SIG_IGN survives exec; Python ignores SIGPIPE and SIGXFSZ)
RESET_SIGNALS = (*KEYBOARD_SIGNALS, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGHUP, signal.SIGTERM)


def write_atomically(path: str, text: str) -> None:
    with open(f"{path}.tmp", "w") as f:
        f.write(text)
    os.replace(f"{path}.tmp", path)


def main() -> None:
    status_path, separator, *argv = sys.argv[1:]
    assert separator == "--" and argv, __doc__
    for sig in KEYBOARD_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)
            os.tcsetpgrp(0, os.getpgrp())
            for sig in RESET_SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
            os.execvp(argv[0], argv)
        except OSError as error:
            print(f"terminal_job: {argv[0]}: {error}", file=sys.stderr)
        os._exit(127)
    # both sides, as shells do: whichever runs first, the command is in the foreground before it runs
    try:
        os.setpgid(pid, pid)
        os.tcsetpgrp(0, pid)
    except OSError:
        pass  # the child did it already (and may have exec'd)
    write_atomically(f"{status_path}.pid", str(pid))
    _, status = os.waitpid(pid, 0)
    ended = time.monotonic()
    code = os.waitstatus_to_exitcode(status)
    write_atomically(status_path, json.dumps({"code": 128 - code if code < 0 else code, "ended": ended}))
    try:
        os.tcsetpgrp(0, os.getpgrp())
    except OSError:
        pass
    while True:  # a shell waits at its prompt: until the terminal is closed (SIGHUP)
        signal.pause()


if __name__ == "__main__":
    main()
