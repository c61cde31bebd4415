#pragma once

// A ps's second door, for the workers on its own host: a Unix stream
// socket in a directory only this user can enter, carrying pstrain's own
// frames (transport/stream_link.h) without ZeroMQ, after an admission
// in which worker and ps show each other the key of the worker's task,
// derived from the job secret (transport/local_links.h). Nothing is encrypted
// there: the bytes go from one process to the other through the kernel
// and never cross a network, so a job with CURVE on moves its co-located
// traffic at plaintext speed (CURVE's XSalsa20-Poly1305 is most of a
// co-located step's cost: benchmarks/README.md), and without ZeroMQ's I/O
// threads between the two ends.
//
// What CURVE over TCP guarantees, and how the Unix socket keeps it:
//  - Nobody else reads or changes the bytes: a Unix socket's traffic is
//    seen by its two ends and root only (who can read either process's
//    memory, and the secret file, under CURVE too).
//  - The ps knows who the peer is: the worker shows it holds the key of
//    its task's name (JobSecret::LocalPassword), checked as CURVE's keys
//    are (transport/local_links.h); so a link's requests are a task of
//    the job's exactly as under CURVE, and a process without the secret
//    is refused.
//  - The worker knows the peer is the ps: the ps tells the worker its
//    path and process id in a HEARTBEAT reply, which comes over CURVE; the
//    worker takes the path only inside its own private directory
//    (LocalDir: its own, mode 0700, no symbolic links), only as a socket
//    it owns, the very file the ps bound (its device and inode, also told
//    over CURVE), and, once connected, only when the kernel says the
//    process listening at the other end is that ps (SO_PEERCRED) and the
//    ps shows it holds the same key. A process that put another socket in
//    the path's place (one of the same user sharing /tmp with the tasks
//    but not given the secret: a sidecar container of the uid) gets no
//    request and nothing it could use later (the key never travels); the
//    worker goes over TCP with CURVE. Where the kernel's word misleads (a
//    ps in another pid namespace whose number the impostor holds in the
//    worker's), such a process could relay both ends live and read them;
//    under CURVE it could not: such pods set --colocated_ipc=false.
//  - Strangers: a process of another user cannot connect at all (the
//    directory; the ps also checks the peer's user), and a network peer
//    cannot reach a Unix socket.
//  - Whoever holds the secret can do what any task can, as under CURVE.
//
// Layout: <base>/pstrain-<uid>/<JobSecret::LocalTag>/<task>-<port>-<pid>.sock,
// base /tmp: one name per ps process, so no ps takes over another's path.
// A ps removes its file at its end, and those of ps processes that are
// gone when it starts. Endpoints are written "unix://<path>".
// Used only between tasks whose spec addresses are on one host
// (SameHost); --colocated_ipc=false turns it off on a worker.
//
// A job without CURVE (--insecure) uses the same links, its keys and
// directory derived from the job's id (LinkSecret), which every task of
// the spec knows: the admission then keeps out other users' processes and
// nobody else of this user, where --insecure's TCP keeps out nobody. What
// it buys there is the round trip without ZeroMQ's I/O threads and the TCP
// stack (benchmarks/README.md). Not with a sparse spec (TFJob's
// enableDynamicWorker), whose ps learns the job's id only from the chief.

#include <sys/un.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/cluster_spec.h"
#include "transport/job_secret.h"

namespace pstrain {

// What a job's links derive their keys and directory from: the job secret
// under CURVE; an --insecure job's public stand-in (JobSecret::Public of
// its id) unless its spec is sparse; nullopt: no links.
std::optional<JobSecret> LinkSecret(const std::optional<JobSecret>& job_secret,
                                    const ClusterSpec& cluster);

// This user's private directory for the job of `secret`:
// <base>/pstrain-<euid>/<tag>.
std::string LocalDir(const JobSecret& secret, absl::string_view base = "/tmp");

// Makes LocalDir `dir` and its parent as needed (mode 0700), then checks
// both as CheckLocalDir does.
absl::Status PrepareLocalDir(const std::string& dir);

// Both `dir` and its parent are directories (not links) owned by this
// user and open to nobody else. FailedPrecondition naming the path and
// what is wrong.
absl::Status CheckLocalDir(const std::string& dir);

// "unix://<dir>/<name>-<port>-<pid>.sock", name a task's ("ps:0" as
// "ps-0"), pid this process's.
std::string LocalEndpoint(const std::string& dir, absl::string_view task_name, int port);
// The path of such an endpoint (the whole string when it has no scheme).
std::string LocalPath(const std::string& endpoint);

// Removes the sockets in `dir` whose ps process is gone (its pid, the
// name's last number, names no process, and a connection is refused);
// returns how many.
int RemoveStaleSockets(const std::string& dir);

// The other jobs' directories beside `own` (this user's, under its
// parent): in each, the sockets of ps processes that are gone, then the
// directory itself once it is empty and has not changed for a minute (a
// ps killed without its cleanup leaves them; a ps about to bind in a
// fresh one is left alone). Returns how many directories went.
int RemoveStaleJobDirs(const std::string& own);

// Which file a path is (lstat's device and inode).
struct LocalFileId {
  uint64_t dev = 0;
  uint64_t inode = 0;
};
// The file of `endpoint` (a ps's, just bound). FailedPrecondition
// when it cannot be read.
absl::StatusOr<LocalFileId> LocalFileIdOf(const std::string& endpoint);

// Whether a worker may connect to `endpoint`, which a ps advertised: a
// unix:// path directly inside `dir`, which passes CheckLocalDir, naming a
// socket owned by this user, the very file `file` the ps bound (not one
// put in its place). FailedPrecondition saying why not.
absl::Status CheckLocalEndpoint(const std::string& endpoint, const std::string& dir,
                                const LocalFileId& file);

// Removes the socket file of `endpoint` (a ps's, at its end) and its
// directory when that is empty then. Errors are ignored: a file left
// behind is never taken for a live ps (only what a ps says is used).
void RemoveLocalEndpoint(const std::string& endpoint);

// The address of Unix socket `path`. InvalidArgument when the path is
// too long for one.
absl::StatusOr<sockaddr_un> UnixAddress(const std::string& path);

// Whether a task at spec address `peer` runs on the host of a task at
// `self`: a loopback address, or the same host name.
bool SameHost(const HostPort& self, const HostPort& peer);

}  // namespace pstrain
