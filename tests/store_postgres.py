"""Runs something against a real PostgreSQL: starts a private server with the gateway
harness (initdb/pg_ctl in a temp dir), then either
  store_postgres.py STORE_TEST_BINARY   the store unit tests with KOI_TEST_POSTGRES_URL set,
                                        so each backend-parameterized test runs on both, or
  store_postgres.py SCRIPT.py           an integration test with KOI_TEST_STORE_URL set (the
                                        cluster harness then runs koi cluster serve on it)."""
import subprocess, sys
from gateway_harness import *

TARGET = sys.argv[1]
env = Env()
try:
    url = env.postgres()
    if TARGET.endswith(".py"):
        r = subprocess.run([sys.executable, TARGET], env=dict(os.environ, KOI_TEST_STORE_URL=url),
                           capture_output=True, text=True)
        print(r.stdout[-4000:], r.stderr[-4000:], flush=True)
        check(r.returncode == 0 and "PASS" in r.stdout, os.path.basename(TARGET) + " passes on PostgreSQL")
    else:
        r = subprocess.run([TARGET, "--gtest_filter=*Postgres*"], env=dict(os.environ, KOI_TEST_POSTGRES_URL=url),
                           capture_output=True, text=True)
        print(r.stdout[-4000:], r.stderr[-2000:], flush=True)
        check(r.returncode == 0, "store tests pass against PostgreSQL")
        check("SKIPPED" not in r.stdout, "no PostgreSQL test was skipped")
finally:
    env.close()
