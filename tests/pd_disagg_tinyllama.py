"""Prefill/decode disaggregation on a random TinyLlama-1.1B-shape model (q4_0), where a
prompt's prefill takes seconds on this CPU and its blocks stream out chunk by chunk
(--max-num-batched-tokens 64 on the prefill worker): greedy output through the transfer
equals one engine's, with and without a decode-side prefix hit; kill -9 of the prefill
worker after blocks have arrived -> the request completes by local prefill with the same
tokens; kill -9 of the decode worker while blocks are in flight -> the prefill worker aborts
the request and its KV pool usage returns to 0 (its /metrics)."""
import os, signal, subprocess, threading, time
from gateway_harness import Env, KOI, check, fail
from pd_disagg import complete, metric, wait_for


def ids(n, salt):
    return [3 + (salt * 7919 + i * 104729) % 31000 for i in range(n)]


def main():
    env = Env()
    try:
        model = os.path.join(env.dir, "tinyllama-q4_0.gguf")
        subprocess.run([KOI, "--log-level", "warn", "convert", "--random", "tinyllama", "--type", "q4_0", "-o", model],
                       check=True, stdout=subprocess.DEVNULL)
        common = ["--kv-cache-memory", "1GiB"]
        ref = env.replica("both", model=model, extra=common)
        pre = env.replica("prefill", model=model, extra=common + ["--role", "prefill", "--kv-port", "0",
                                                                   "--max-num-batched-tokens", "64"])
        dec = env.replica("decode", model=model, extra=common + ["--role", "decode", "--kv-transfer-timeout", "120"])
        long_prompt = ids(600, 1)
        want = complete(ref.url, long_prompt, max_tokens=8, timeout=300)
        check(want[0] == 200, "reference answer")
        check(complete(dec.url, long_prompt, pre.kv, max_tokens=8, timeout=300) == want, "TinyLlama shape: disaggregated == one engine")
        extended = long_prompt + ids(200, 2)
        want2 = complete(ref.url, extended, max_tokens=8, timeout=300)
        bytes_before = metric(dec, "koi:kv_transfer_bytes_total")
        check(complete(dec.url, extended, pre.kv, max_tokens=8, timeout=300) == want2,
              "decode side holding the first 600 tokens: identical")
        sent = metric(dec, "koi:kv_transfer_bytes_total") - bytes_before
        check(sent < (800 - 592) / 16 * 22 * 2 * 16 * 256 * 4 * 1.1, f"only the uncached blocks crossed ({sent:.0f} bytes)")

        # kill -9 the prefill worker once blocks are arriving.
        victim_prompt = ids(900, 3)
        want3 = complete(ref.url, victim_prompt, max_tokens=8, timeout=300)
        out = {}
        bytes_before = metric(dec, "koi:kv_transfer_bytes_total")
        t = threading.Thread(target=lambda: out.setdefault("r", complete(dec.url, victim_prompt, pre.kv, max_tokens=8, timeout=300)))
        t.start()
        wait_for(lambda: metric(dec, "koi:kv_transfer_bytes_total") > bytes_before, "blocks to arrive", timeout=120)
        pre.kill9()
        t.join(300)
        check(out.get("r") == want3, "prefill worker killed with blocks in flight: same tokens by local prefill")
        check(metric(dec, "koi:kv_transfer_fallbacks_total") == 1, "one fallback")
        wait_for(lambda: metric(dec, "koi:kv_cache_usage_perc") == 0, "the decode worker's blocks to be released", timeout=60)

        # kill -9 the decode worker once blocks are leaving the prefill worker.
        pre2 = env.replica("prefill2", model=model, extra=common + ["--role", "prefill", "--kv-port", "0",
                                                                     "--max-num-batched-tokens", "64"])
        t = threading.Thread(target=lambda: complete(dec.url, ids(900, 4), pre2.kv, max_tokens=8, timeout=300))
        t.start()
        wait_for(lambda: metric(dec, "koi:kv_transfer_bytes_total") > 0 and metric(pre2, "koi:kv_cache_usage_perc") > 0,
                 "the second transfer to start", timeout=120)
        dec.kill9()
        t.join(30)
        wait_for(lambda: metric(pre2, "koi:kv_cache_usage_perc") == 0 and metric(pre2, "koi:num_requests_running") == 0,
                 "the prefill worker's pool to return to its baseline", timeout=120)
        log = open(os.path.join(env.dir, "prefill2.log")).read()
        check("the decode worker went away" in log or "aborting it" in log, "the prefill worker aborted the orphaned request")
        check(True, "decode worker killed mid-transfer: prefill worker's KV usage back to 0")
        print("PASS")
    finally:
        env.close()


if __name__ == "__main__":
    main()
