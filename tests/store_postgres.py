"""store::Database against a real PostgreSQL: starts a private server with the gateway
harness (initdb/pg_ctl in a temp dir) and runs the store unit tests with
KOI_TEST_POSTGRES_URL pointing at it, so each backend-parameterized test runs on both."""
import subprocess, sys
from gateway_harness import *

STORE_TEST = sys.argv[1]
env = Env()
try:
    url = env.postgres()
    r = subprocess.run([STORE_TEST, "--gtest_filter=*Postgres*"], env=dict(os.environ, KOI_TEST_POSTGRES_URL=url),
                       capture_output=True, text=True)
    print(r.stdout[-4000:], r.stderr[-2000:], flush=True)
    check(r.returncode == 0, "store tests pass against PostgreSQL")
    check("SKIPPED" not in r.stdout, "no PostgreSQL test was skipped")
finally:
    env.close()
