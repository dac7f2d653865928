// The trainer's own report of a hung collective, as its collective watchdog writes it to the
// job's log (train/collectives.h, train/watchdog.h):
//   watchdog: rank 0 step 12: collective 'allreduce grads bucket 3' did not complete within
//   5 s; not responding: rank 1
// The Hung diagnosis quotes it (docs/cluster.md#diagnoses): it names the collective and the
// silent ranks, which the process tree alone cannot. Pure functions over text; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace koi::cluster {

// The last watchdog report in `log` (from "watchdog: rank " to the end of its line, whatever
// prefix a logger put before it); nullopt when there is none.
std::optional<std::string> find_watchdog_report(std::string_view log);

}  // namespace koi::cluster
