// Linked into every target of a ThreadSanitizer build (with
// tsan_absl_mutex.cc), so tests and the processes they start all read the
// same suppressions without any TSAN_OPTIONS. Each entry says why it is
// there; none names project code.

extern "C" const char* __tsan_default_suppressions() {
  return
      // libzmq is not built with TSan. Its I/O threads and the application
      // threads hand messages over through lock-free pipes whose atomics
      // run uninstrumented, so TSan sees none of that synchronisation, only
      // the interceptors libzmq calls (memcpy of a message body, malloc and
      // free): every send of a buffer the application wrote reads as a race
      // (first seen: TransportTest.RequestAndReplyRoundTripWithPayload, the
      // I/O thread copying a zero-copy payload). Ignore the interceptors
      // called from libzmq; accesses from our own code are still checked.
      // What this gives up: a race between our code and libzmq's threads on
      // a zero-copy payload (writing it before the peer answered).
      "called_from_lib:libzmq.so\n"
      // With CURVE, libzmq's I/O thread decrypts each message with
      // libsodium (crypto_secretbox_open_detached, memmove into the message
      // buffer), and the application thread then parses that buffer: the
      // hand-over is the same uninstrumented pipe as above, so every
      // received message read as a race (AttackedPs, LivePs, every CURVE
      // job under TSan). Ignore the interceptors called from libsodium too.
      // What this gives up: races inside libsodium calls of our own (only
      // the single-threaded key derivation at start-up makes any).
      "called_from_lib:libsodium.so\n"
      // glog computes the UTC offset of every log line with localtime_r,
      // which runs glibc's tzset_internal under glibc's own lock (not a
      // pthread mutex TSan can see): two threads logging at once (the
      // heartbeat thread's "closed its connection" warning and the
      // training thread) read as a race on the TZ string it frees and
      // strdups. glibc serialises it; ignore that function.
      "race:tzset_internal\n";
}
