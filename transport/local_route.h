#pragma once

// A ps's second door, for the workers on its own host: a Unix socket
// (ZeroMQ's ipc://) in a directory only this user can enter, on which
// ZeroMQ's PLAIN mechanism names the task and a password derived from the
// job secret proves it. Nothing is encrypted there: the bytes go from one
// process to the other through the kernel and never cross a network, so
// a job with CURVE on moves its co-located traffic at plaintext speed
// (CURVE's XSalsa20-Poly1305 is most of a co-located step's cost:
// benchmarks/README.md).
//
// What CURVE over TCP guarantees, and how the Unix socket keeps it:
//  - Nobody else reads or changes the bytes: a Unix socket's traffic is
//    seen by its two ends and root only (who can read either process's
//    memory, and the secret file, under CURVE too).
//  - The ps knows who the peer is: the ps's ZAP handler
//    (transport/handshake_guard.h) checks PLAIN's username and password
//    as it checks CURVE's keys. The password is JobSecret::LocalPassword
//    of the username, a task name, so a peer's User-Id is a task of the
//    job exactly as under CURVE; a process without the secret is refused.
//  - The worker knows the peer is the ps: the ps tells the worker its
//    path and process id in a HEARTBEAT reply, which comes over CURVE, and
//    the worker takes the path only inside its own private directory
//    (LocalDir: its own, mode 0700, no symbolic links), only as a socket
//    it owns, only as the very file the ps bound (its device and inode,
//    also told over CURVE), and only while a listening socket bound there
//    is one of that process's open files (CheckLocalListener:
//    /proc/net/unix and /proc/<pid>/fd), so the ps must be a process it
//    can see. A process
//    of another user can neither make nor replace the file. One of the
//    same user that shares /tmp with the tasks but was not given the
//    secret (a sidecar container of the uid with /tmp mounted) could
//    swap the file between that check and the connection, a window of
//    microseconds at a worker's join (a file put there earlier is not the
//    one the ps bound); under CURVE it could not. Such a
//    pod runs its workers with --colocated_ipc=false. Without containers
//    a process of the user can read the secret file anyway.
//  - Strangers: a process of another user cannot connect at all (the
//    directory), and a network peer cannot reach a Unix socket.
//  - Whoever holds the secret can do what any task can, as under CURVE.
//
// Layout: <base>/pstrain-<uid>/<JobSecret::LocalTag>/<task>-<port>-<pid>.sock,
// base /tmp: one name per ps process, so no ps takes over another's path
// (libzmq's bind removes a file in its way). A ps removes its file at its
// end, and those of ps processes that are gone when it starts.
// Used only with CURVE on (a job secret), and only between tasks whose
// spec addresses are on one host (SameHost); --colocated_ipc=false turns
// it off on a worker.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/cluster_spec.h"
#include "transport/job_secret.h"

namespace pstrain {

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

// "ipc://<dir>/<name>-<port>-<pid>.sock", name a task's ("ps:0" as
// "ps-0"), pid this process's.
std::string LocalEndpoint(const std::string& dir, absl::string_view task_name, int port);

// Removes the sockets in `dir` whose ps process is gone (its pid, the
// name's last number, names no process, and a connection is refused);
// returns how many.
int RemoveStaleSockets(const std::string& dir);

// Whether the listening Unix socket bound at `endpoint`'s path is an
// open file of process `pid` (the ps that advertised it).
// FailedPrecondition saying why not (another process's, none, a process
// this one cannot see).
absl::Status CheckLocalListener(const std::string& endpoint, int64_t pid);

// Which file a path is (lstat's device and inode).
struct LocalFileId {
  uint64_t dev = 0;
  uint64_t inode = 0;
};
// The file of ipc:// `endpoint` (a ps's, just bound). FailedPrecondition
// when it cannot be read.
absl::StatusOr<LocalFileId> LocalFileIdOf(const std::string& endpoint);

// Whether a worker may connect to `endpoint`, which a ps advertised: an
// ipc:// path directly inside `dir`, which passes CheckLocalDir, naming a
// socket owned by this user, the very file `file` the ps bound (not one
// put in its place). FailedPrecondition saying why not.
absl::Status CheckLocalEndpoint(const std::string& endpoint, const std::string& dir,
                                const LocalFileId& file);

// Removes the socket file of `endpoint` (a ps's, at its end) and its
// directory when that is empty then. Errors are ignored: a file left
// behind is never taken for a live ps (only what a ps says is used).
void RemoveLocalEndpoint(const std::string& endpoint);

// Whether a task at spec address `peer` runs on the host of a task at
// `self`: a loopback address, or the same host name.
bool SameHost(const HostPort& self, const HostPort& peer);

}  // namespace pstrain
