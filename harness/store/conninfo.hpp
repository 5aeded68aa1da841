#pragma once
// The results database's connection string, as kcert hands it to libpq: with timeouts a
// user would not know to add, and with its password kept out of every message.
#include <string>

namespace kcert::store {

// Seconds libpq may spend establishing a connection (connect + startup + authentication)
// when neither the connection string nor PGCONNECT_TIMEOUT says otherwise. Without it a
// server that accepts TCP connections but never answers hangs the nightly before any
// control runs (issue 13: measured hung forever; with it, an error in ~10 s and the run
// spools its results for a later `kcert upload`).
inline constexpr int kDefaultConnectTimeoutSeconds = 10;

// `conninfo` (URI, key=value, or empty for libpq's defaults) with connect_timeout and TCP
// keepalives (idle 30 s, interval 10 s, 3 probes: a peer that vanished mid-run is noticed in
// about a minute instead of the system's two hours) added where it does not set them.
std::string with_default_timeouts(const std::string& conninfo);

// `message` with the password of `conninfo` (and of PGPASSWORD) removed: every literal
// occurrence of it or of any of its space-separated pieces, and every quoted fragment of
// the message that lies inside the password's part of the connection string. libpq echoes
// malformed connection strings in its parse errors (`IPv6 host address may not be empty in
// URI: "postgresql://kcert:PW@[]:5432/db"`), and the nightly repeats them in its journal.
std::string redact_password(std::string message, const std::string& conninfo);

}  // namespace kcert::store
