#!/usr/bin/env python3
"""Structured output end to end (issue 19, Must show 3): every output of random sampling
(temperature 1, 20 seeds per schema: n=20 with a seed, the server seeds choice i with seed+i)
parses as JSON and validates against its schema, for every schema of
tests/structured_output_schemas.json, checked by an independent validator (Debian's
python3-jsonschema, Draft 2020-12 with its format checker). Also checks regex, choice and
GBNF constraints with Python's re, and a streamed constrained request (chunks arrive over
time and join into a valid document).

  structured_output.py <koi> <shared dir> stories260k|tinyllama [max_tokens]

stories260k: the real model from ../shared. tinyllama: a random-weight model of TinyLlama
1.1B's shape (32000-token vocabulary) written by `koi convert --random tinyllama --type q4_0`.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import jsonschema

KOI, SHARED, MODEL = sys.argv[1], sys.argv[2], sys.argv[3]
MAX_TOKENS = int(sys.argv[4]) if len(sys.argv) > 4 else 200
SEEDS = 20
HERE = os.path.dirname(os.path.abspath(__file__))


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=1200) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def start_server(work):
    model = os.path.join(work, "model.gguf")
    if MODEL == "stories260k":
        convert = ["convert", "--llama2c", f"{SHARED}/models/stories260K/stories260K.bin",
                   "--tokenizer", f"{SHARED}/models/stories260K/tok512.bin", "-o", model]
    else:
        convert = ["convert", "--random", "tinyllama", "--type", "q4_0", "-o", model]
    subprocess.run([KOI, "--log-level", "warn"] + convert, check=True, stdout=subprocess.DEVNULL)
    out = open(os.path.join(work, "server.out"), "w+")
    err = open(os.path.join(work, "server.err"), "w+")
    proc = subprocess.Popen([KOI, "serve", "--model", model, "--port", "0", "--served-model-name", "m",
                             "--kv-cache-memory", "512MiB"], stdout=out, stderr=err)
    for _ in range(600):
        out.seek(0)
        text = out.read()
        if "listening on" in text:
            return proc, text.split("listening on ")[1].split()[0]
        if proc.poll() is not None:
            err.seek(0)
            sys.exit("FAIL: server exited at start:\n" + err.read())
        time.sleep(0.1)
    sys.exit("FAIL: server did not start")


def check_schemas(url, failures):
    schemas = json.load(open(os.path.join(HERE, "structured_output_schemas.json")))
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    total = 0
    for index, schema in enumerate(schemas):
        validator = jsonschema.Draft202012Validator(schema, format_checker=checker)
        body = {"model": "m", "prompt": "Once upon a time", "max_tokens": MAX_TOKENS, "temperature": 1.0,
                "n": SEEDS, "seed": 1000 * index,
                "response_format": {"type": "json_schema", "json_schema": {"name": f"s{index}", "schema": schema,
                                                                            "strict": True}}}
        status, r = post(url + "/v1/completions", body)
        if status != 200:
            failures.append(f"schema {index}: HTTP {status}: {r}")
            continue
        for choice in r["choices"]:
            total += 1
            text = choice["text"]
            try:
                doc = json.loads(text)
            except json.JSONDecodeError as e:
                failures.append(f"schema {index} choice {choice['index']}: not JSON ({e}): {text!r}")
                continue
            errors = [e.message for e in validator.iter_errors(doc)]
            if errors:
                failures.append(f"schema {index} choice {choice['index']}: {errors[0]}: {text!r}")
        print(f"schema {index:2d}: {len(r['choices'])} outputs, e.g. {r['choices'][0]['text'][:70]!r}", flush=True)
    return len(schemas), total


def check_other_constraints(url, failures):
    cases = [
        ({"guided_regex": "[a-z]{2,6}@[a-z]{2,5}\\.(com|org)"}, lambda t: re.fullmatch(r"[a-z]{2,6}@[a-z]{2,5}\.(com|org)", t)),
        ({"guided_choice": ["sunny", "rainy", "cloudy day"]}, lambda t: t in ("sunny", "rainy", "cloudy day")),
        ({"guided_grammar": 'root ::= "(" expr ")"\nexpr ::= term (("+" | "*") term){0,3}\nterm ::= [1-9] | "(" expr ")"'},
         lambda t: re.fullmatch(r"[()1-9+*]+", t) and balanced(t)),
        ({"response_format": {"type": "json_object"}}, lambda t: isinstance(json.loads(t), dict)),
    ]
    for extra, ok in cases:
        body = {"model": "m", "prompt": "Once upon a time", "max_tokens": MAX_TOKENS, "temperature": 1.0, "n": SEEDS,
                "seed": 7}
        body.update(extra)
        status, r = post(url + "/v1/completions", body)
        if status != 200:
            failures.append(f"{extra}: HTTP {status}: {r}")
            continue
        for choice in r["choices"]:
            try:
                good = ok(choice["text"])
            except Exception:  # json.loads of a non-document
                good = False
            if not good:
                failures.append(f"{list(extra)[0]}: {choice['text']!r}")
        print(f"{list(extra)[0]}: e.g. {r['choices'][0]['text'][:70]!r}", flush=True)


def balanced(t):
    depth = 0
    for c in t:
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth < 0:
            return False
    return depth == 0


def check_stream(url, failures):
    """A streamed json_schema request: the chunks come over time and join into a valid document."""
    schema = {"type": "object", "properties": {"story": {"type": "string", "minLength": 40, "maxLength": 60}},
              "required": ["story"]}
    body = {"model": "m", "messages": [{"role": "user", "content": "Tell a story"}], "max_tokens": MAX_TOKENS,
            "temperature": 1.0, "seed": 3, "stream": True,
            "response_format": {"type": "json_schema", "json_schema": {"name": "story", "schema": schema}}}
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    text, arrivals, finish = "", [], None
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for c in chunk["choices"]:
                if c["delta"].get("content"):
                    text += c["delta"]["content"]
                    arrivals.append(time.monotonic())
                finish = c.get("finish_reason") or finish
    try:
        jsonschema.validate(json.loads(text), schema)
    except Exception as e:  # not JSON or not valid
        failures.append(f"stream: {e}: {text!r}")
    if len(arrivals) < 10 or arrivals[-1] - arrivals[0] <= 0:
        failures.append(f"stream: {len(arrivals)} content chunks, not spread over time")
    if finish != "stop":
        failures.append(f"stream: finish_reason {finish}")
    print(f"stream: {len(arrivals)} chunks over {arrivals[-1] - arrivals[0]:.3f} s: {text[:70]!r}", flush=True)


def main():
    work = tempfile.mkdtemp()
    proc, url = start_server(work)
    failures = []
    try:
        started = time.monotonic()
        num_schemas, total = check_schemas(url, failures)
        check_other_constraints(url, failures)
        check_stream(url, failures)
        elapsed = time.monotonic() - started
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    for f in failures[:20]:
        print("FAIL:", f)
    if failures:
        sys.exit(f"FAIL: {len(failures)} failures")
    print(f"PASS: {total} outputs of {num_schemas} schemas on {MODEL} validate ({elapsed:.0f} s)")


main()
