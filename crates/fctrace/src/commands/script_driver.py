# fctrace script's driver: run by `python3 -c` with the user's script as
# argv[1] and a JSON object on argv[2] (uftrace_begin's context). It reads
# the trace's events from its standard input, one JSON object a line (see
# fctrace-analysis' script.rs), and calls the script's uftrace_begin(ctx),
# uftrace_entry(ctx), uftrace_exit(ctx) and uftrace_end(), as uftrace does.
# The script's own standard input is /dev/null. Exit status: 0, 2 when the
# script cannot be read or compiled, 3 when one of its functions raised.
import json
import os
import re
import sys
import traceback

path, begin = sys.argv[1], json.loads(sys.argv[2])
events = os.fdopen(os.dup(0), "rb")
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)
os.close(null)
sys.stdin = open(os.devnull)
sys.argv = [path] + begin.get("script_args", [])

try:
    with open(path, "rb") as f:
        source = f.read()
    code = compile(source, path, "exec")
except (OSError, SyntaxError, ValueError):
    traceback.print_exc(limit=0)
    sys.exit(2)

scope = {"__name__": "__main__", "__file__": path}


def call(name, *args):
    fn = scope.get(name)
    if fn is None:
        return
    try:
        fn(*args)
    except SystemExit:
        raise
    except BaseException:
        sys.stdout.flush()
        # The script's frames only, not the driver's.
        kind, value, tb = sys.exc_info()
        traceback.print_exception(kind, value, tb.tb_next)
        sys.exit(3)


try:
    exec(code, scope)
except SystemExit:
    raise
except BaseException:
    kind, value, tb = sys.exc_info()
    traceback.print_exception(kind, value, tb.tb_next)
    sys.exit(3)

wanted = None
if "UFTRACE_FUNCS" in scope:
    wanted = [re.compile(p) for p in scope["UFTRACE_FUNCS"]]

call("uftrace_begin", {k: begin[k] for k in ("record", "version", "cmds")})
entry = scope.get("uftrace_entry")
exit_ = scope.get("uftrace_exit")
for line in events:
    ctx = json.loads(line)
    kind = ctx.pop("kind")
    if wanted is not None and not any(p.search(ctx["name"]) for p in wanted):
        continue
    if kind == "entry" and entry is not None:
        call("uftrace_entry", ctx)
    elif kind == "exit" and exit_ is not None:
        call("uftrace_exit", ctx)
call("uftrace_end")
sys.stdout.flush()
