// SPDX-License-Identifier: MIT
// A small DataParallel training loop in which rank 1 fails at step 3, for
// the ctest failure cases (tests/CMakeLists.txt), run as
//   mpirun -np 2 dist_failure raise|die|hang
//   raise  rank 1 throws a snug::Error; its handler prints it and aborts the
//          job (ProcessGroup::abort -> MPI_Abort), so rank 0, waiting in an
//          all-reduce, is stopped too
//   die    rank 1 exits on the spot (std::_Exit, no MPI_Finalize); the
//          launcher sees it and ends the job
//   hang   rank 1 stops taking part (sleeps 120 s); rank 0's all-reduce times
//          out after SNUG_DIST_TIMEOUT seconds with DistributedTimeoutError,
//          and its handler aborts the job
// In every case the job must end within seconds, with the error on stderr.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <snug/core/generator.h>
#include <snug/distributed/data_parallel.h>
#include <snug/nn/functional.h>
#include <snug/nn/layers.h>
#include <snug/nn/optim/optimizer.h>

using namespace snug;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  std::shared_ptr<distributed::ProcessGroup> pg;
  try {
    SNUG_CHECK(mode == "raise" || mode == "die" || mode == "hang", ValueError,
               "dist_failure: mode must be raise, die or hang, got \"", mode, "\"");
    pg = distributed::init_process_group();
    manual_seed(1);
    nn::Linear model(32, 32);
    distributed::DataParallel dp(model, pg);
    nn::optim::SGD opt(model.parameters(), {.lr = 0.01});
    for (int step = 0; step < 1000; ++step) {
      if (pg->rank() == 1 && step == 3) {
        std::fprintf(stderr, "dist_failure: rank 1 fails (%s) at step 3\n", mode.c_str());
        if (mode == "raise") throw ValueError("injected failure on rank 1 at step 3");
        if (mode == "die") std::_Exit(9);
        std::this_thread::sleep_for(std::chrono::seconds(120));
      }
      opt.zero_grad();
      nn::functional::mse_loss(model.forward(randn({8, 32})), zeros({8, 32})).backward();
      opt.step();
    }
    std::fprintf(stderr, "dist_failure: rank %d finished 1000 steps: the failure was not noticed\n", pg->rank());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist_failure: rank %d: error: %s\n", pg ? pg->rank() : -1, e.what());
    if (pg && pg->size() > 1) pg->abort(3);
    return 3;
  }
}
