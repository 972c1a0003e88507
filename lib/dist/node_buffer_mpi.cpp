// The node-shared block as an MPI-3 shared window (MPI_Win_allocate_shared): the MPI library makes
// and removes its backing segment (Open MPI 4.1: a file /dev/shm/osc_sm.HOST.JOB.RANK.CID
// (osc_sm_backing_directory), unlinked as soon as the node's ranks have mapped it: /proc/PID/maps
// shows it "(deleted)"), so no block outlives its job, even one killed, and no later job can find
// a stale one.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <exception>

#include "core/error.h"
#include "dist/node_buffer_mpi.h"

namespace hpcnn::dist::detail {

namespace {

void check(int rc, const char* call, const std::string& where, size_t bytes) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw_error(ErrorKind::device, std::string(call) + " of " + std::to_string(bytes) + " bytes of node-shared memory failed on " +
                                     where + ": " + std::string(msg, static_cast<size_t>(len)));
}

class Window final : public NodeBuffer {
 public:
  Window(MPI_Comm node, size_t bytes, const std::function<void(void*)>& fill, const std::string& where) {
    int local = 0;
    MPI_Comm_rank(node, &local);
    uint64_t n = bytes;
    check(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, node), "MPI_Bcast", where, bytes);
    size_ = static_cast<size_t>(n);
    void* base = nullptr;
    check(MPI_Win_allocate_shared(static_cast<MPI_Aint>(local == 0 ? size_ : 0), 1, MPI_INFO_NULL, node, &base, &win_),
          "MPI_Win_allocate_shared", where, size_);
    MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN);
    if (local == 0) {
      fill(base);
    } else {
      MPI_Aint got = 0;
      int unit = 0;
      check(MPI_Win_shared_query(win_, 0, &got, &unit, &base), "MPI_Win_shared_query", where, size_);
      if (static_cast<size_t>(got) != size_)
        throw_error(ErrorKind::device, "node-shared memory: local rank 0's segment has " + std::to_string(got) + " bytes, " +
                                           std::to_string(size_) + " expected, on " + where);
    }
    // Local rank 0's stores become visible to the node's other ranks: a memory barrier around
    // the node barrier (the unified memory model of MPI-3 shared windows).
    check(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_), "MPI_Win_lock_all", where, size_);
    MPI_Win_sync(win_);
    check(MPI_Barrier(node), "MPI_Barrier", where, size_);
    MPI_Win_sync(win_);
    check(MPI_Win_unlock_all(win_), "MPI_Win_unlock_all", where, size_);
    data_ = base;
    protect(PROT_READ);
  }
  // MPI_Win_free is collective over the node: a window dropped while an exception unwinds (a
  // failed rank, whose job is about to be aborted) is left to the MPI library, which removes it at
  // the job's end, instead of waiting for node ranks that may never come.
  ~Window() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized || std::uncaught_exceptions() > 0) return;
    protect(PROT_READ | PROT_WRITE);
    MPI_Win_free(&win_);
  }
  bool shared() const override { return true; }

 private:
  // The pages wholly inside the block, in this process's mapping: a stray write through the
  // cache is a segmentation fault here, not a silent change of every rank's data.
  void protect(int prot) {
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto begin = reinterpret_cast<uintptr_t>(data_), end = begin + size_;
    const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
    if (last > first) ::mprotect(reinterpret_cast<void*>(first), last - first, prot);  // best effort
  }
  MPI_Win win_ = MPI_WIN_NULL;
};

}  // namespace

std::shared_ptr<const NodeBuffer> node_shared_window(MPI_Comm node, size_t bytes, const std::function<void(void*)>& fill,
                                                     const std::string& where) {
  return std::make_shared<Window>(node, bytes, fill, where);
}

}  // namespace hpcnn::dist::detail
