// The node-shared block as an MPI-3 shared window (MPI_Win_allocate_shared): the MPI library makes
// and removes its backing segment (Open MPI 4.1: a file /dev/shm/osc_sm.HOST.JOB.RANK.CID
// (osc_sm_backing_directory), unlinked as soon as the node's ranks have mapped it: /proc/PID/maps
// shows it "(deleted)"), so no block outlives its job, even one killed, and no later job can find
// a stale one.
#include "dist/node_buffer_mpi.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <exception>

#include "core/error.h"

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
  Window(MPI_Win win, const void* base, size_t bytes) : win_(win) {
    data_ = base;
    size_ = bytes;
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
                                                     const std::string& where, std::string* unavailable) {
  int local = 0;
  MPI_Comm_rank(node, &local);
  uint64_t n = bytes;
  check(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, node), "MPI_Bcast", where, bytes);
  const auto size = static_cast<size_t>(n);
  void* base = nullptr;
  MPI_Win win = MPI_WIN_NULL;
  check(MPI_Win_allocate_shared(static_cast<MPI_Aint>(local == 0 ? size : 0), 1, MPI_INFO_NULL, node, &base, &win),
        "MPI_Win_allocate_shared", where, size);
  MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
  // Every rank, local rank 0 too, asks for local rank 0's segment: a window that is not a shared
  // one (Open MPI with pml monitoring enabled, say, answers MPI_ERR_RMA_FLAVOR) fails alike on every
  // rank of the node, which then free it together and report it.
  MPI_Aint got = 0;
  int unit = 0;
  const int rc = MPI_Win_shared_query(win, 0, &got, &unit, &base);
  if (rc != MPI_SUCCESS || static_cast<size_t>(got) < size) {
    MPI_Win_free(&win);
    std::string why = "MPI_Win_shared_query";
    if (rc != MPI_SUCCESS) {
      char msg[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, msg, &len);
      why += ": " + std::string(msg, static_cast<size_t>(len));
    } else {
      why += " gave " + std::to_string(got) + " bytes for " + std::to_string(size);
    }
    if (unavailable) {
      *unavailable = "the MPI library gave no shared-memory window (" + why + ")";
      return nullptr;
    }
    throw_error(ErrorKind::device, "node-shared memory of " + std::to_string(size) + " bytes on " + where + ": " + why);
  }
  if (local == 0) fill(base);
  // Local rank 0's stores become visible to the node's other ranks: a memory barrier around
  // the node barrier (the unified memory model of MPI-3 shared windows).
  check(MPI_Win_lock_all(MPI_MODE_NOCHECK, win), "MPI_Win_lock_all", where, size);
  MPI_Win_sync(win);
  check(MPI_Barrier(node), "MPI_Barrier", where, size);
  MPI_Win_sync(win);
  check(MPI_Win_unlock_all(win), "MPI_Win_unlock_all", where, size);
  return std::make_shared<Window>(win, base, size);
}

}  // namespace hpcnn::dist::detail
