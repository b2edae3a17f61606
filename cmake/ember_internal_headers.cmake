# The library's own headers: marked "Internal" at their top, included only by ember's sources (no
# installed header includes one), so `cmake --install` leaves them out. tests/install checks both:
# none of these is installed, every other header is, and no installed header includes one of these.
# parallel/tcp_socket.h is internal too but stays installed: parallel/store.h includes it.
set(EMBER_INTERNAL_HEADERS
    autograd/ops_util.h
    core/cuda/runtime.h
    core/pinned.h
    data/io.h
    data/transfer.h
    kernels/cpu/gemm_blocked.h
    kernels/cuda/conv_plan.h
    parallel/collective.h
    parallel/cuda/ring_reduce.h
    parallel/peer_io.h
    parallel/store_protocol.h
    parallel/store_server_state.h)
