"""trace_ids.py -- the process and thread id rules of OctoPipe's Chrome/Perfetto traces
(docs/report.md, "Trace"), shared by tests/report/Inputs/check_trace.py and
tests/runtime/Inputs/check_trace.py. Perfetto takes a thread whose tid equals some pid for that
process's main thread, tid/pid 0 for the idle task, and assumes tids unique in the whole trace;
a trace that breaks these rules shows slices on another device's tracks or drops them.
(Not a test: lit skips Inputs/.)"""


def check_ids(events):
    """Check the ids of a traceEvents list: no pid or tid is 0; no tid equals a pid; a tid
    belongs to one process only; every process has a process_name and a process_sort_index, the
    sort indexes are distinct; every thread that has events has a thread_name. Returns None when
    the rules hold, else the first broken rule as a sentence."""
    pids, proc_sort, thread_of = set(), {}, {}
    named_procs, named_threads = set(), set()
    for e in events:
        pid, tid = e.get("pid"), e.get("tid")
        if pid is None:
            continue
        pids.add(pid)
        if pid == 0:
            return "pid 0 (Perfetto's idle task) in " + e["name"]
        if tid is not None:
            if tid == 0:
                return "tid 0 in %s of pid %d" % (e["name"], pid)
            if thread_of.setdefault(tid, pid) != pid:
                return "tid %d is in processes %d and %d" % (tid, thread_of[tid], pid)
        if e.get("ph") == "M":
            if e["name"] == "process_name":
                named_procs.add(pid)
            elif e["name"] == "process_sort_index":
                proc_sort[pid] = e["args"]["sort_index"]
            elif e["name"] == "thread_name":
                named_threads.add(tid)
    for tid, pid in thread_of.items():
        if tid in pids:
            return "tid %d of process %d is the pid of another process" % (tid, pid)
        if tid not in named_threads:
            return "tid %d of process %d has no thread_name" % (tid, pid)
    if named_procs != pids:
        return "processes without a process_name: %s" % sorted(pids - named_procs)
    if set(proc_sort) != pids:
        return "processes without a process_sort_index: %s" % sorted(pids - set(proc_sort))
    if len(set(proc_sort.values())) != len(proc_sort):
        return "two processes share a process_sort_index"
    return None
