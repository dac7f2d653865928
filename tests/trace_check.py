"""A checker for Chrome trace event files (the JSON object form Koi's --profile writes):
well-formed events, and spans on each track (pid, tid) that nest (a span starting inside
another ends inside it). check(path_or_dict) returns the complete ("X") events, sorted by
track and time, each with a "children" list of the spans directly inside it; it raises
TraceError naming the first problem."""
import json


class TraceError(Exception):
    pass


def _events(trace):
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise TraceError("not a Chrome trace: want an object with a traceEvents list")
    out = []
    for i, e in enumerate(trace["traceEvents"]):
        if not isinstance(e, dict) or "ph" not in e:
            raise TraceError(f"event {i} has no ph")
        if e["ph"] == "M":
            continue
        if e["ph"] != "X":
            raise TraceError(f"event {i}: phase {e['ph']!r}, want X (complete) or M (metadata)")
        for key, kind in (("name", str), ("pid", int), ("tid", int), ("ts", (int, float)), ("dur", (int, float))):
            if not isinstance(e.get(key), kind):
                raise TraceError(f"event {i} ({e.get('name')}): {key} missing or of the wrong type")
        if e["dur"] < 0 or e["ts"] < 0:
            raise TraceError(f"event {i} ({e['name']}): negative ts or dur")
        out.append(dict(e, children=[]))
    return out


def check(trace, slack_us=0.002):
    """slack_us: rounding allowed at span edges (timestamps are printed to 1 ns)."""
    if isinstance(trace, str):
        with open(trace) as f:
            trace = json.load(f)
    events = _events(trace)
    events.sort(key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"]))
    stack, track = [], None
    roots = []
    for e in events:
        if (e["pid"], e["tid"]) != track:
            stack, track = [], (e["pid"], e["tid"])
        end = e["ts"] + e["dur"]
        while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - slack_us:
            stack.pop()
        if stack:
            parent = stack[-1]
            if end > parent["ts"] + parent["dur"] + slack_us:
                raise TraceError(f"span {e['name']} at {e['ts']} us overlaps {parent['name']} at {parent['ts']} us "
                                 "without nesting in it")
            parent["children"].append(e)
        else:
            roots.append(e)
        stack.append(e)
    return events, roots
