// Stopping fleetsim: --max-wall, --max-memory and Ctrl-C write what finished, marked partial;
// a process killed while it writes its result file leaves the previous file or none.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/temp_dir.hpp"
#include "sim/report/report.hpp"

namespace fs = std::filesystem;
using fleetsim::testing::TempDir;

extern char** environ;

namespace {

const std::string kSmallThenHuge = std::string(FLEETSIM_TEST_DATA_DIR) + "/small-then-huge.yaml";

// The second variant alone: a step that takes minutes.
const char* const kHuge = R"(name: stop-test-huge
model: llama3-405b
training: {seq_len: 8192, global_batch: 2048, micro_batch: 1}
layout: {tp: 8, pp: 16, vpp: 4, dp: 128, recompute: full, zero: 1}
cluster:
  node: dgx-h100
  nodes: 2048
  fabric: {kind: rail-fat-tree, link: 400Gbps}
)";

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// fleetsim started with `arguments`, its stdout and stderr going to files in `dir`.
class Fleetsim {
 public:
  Fleetsim(const TempDir& dir, const std::vector<std::string>& arguments)
      : out_(dir.path() / "out"), err_(dir.path() / "err") {
    std::vector<std::string> argv_text{FLEETSIM_CLI};
    argv_text.insert(argv_text.end(), arguments.begin(), arguments.end());
    std::vector<char*> argv;
    for (std::string& argument : argv_text) argv.push_back(argument.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, out_.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&files, STDERR_FILENO, err_.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int error = posix_spawn(&pid_, argv[0], &files, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&files);
    REQUIRE(error == 0);
  }

  void signal(int number) const { REQUIRE(::kill(pid_, number) == 0); }

  // Whether it has ended; then its status is gone (this is for a check that it must not have).
  bool ended() const {
    int status = 0;
    return ::waitpid(pid_, &status, WNOHANG) == pid_;
  }

  // Its resident memory, from /proc (0 once it has ended).
  double resident_bytes() const {
    std::ifstream statm("/proc/" + std::to_string(pid_) + "/statm");
    double pages = 0;
    double resident = 0;
    statm >> pages >> resident;
    return resident * static_cast<double>(::sysconf(_SC_PAGESIZE));
  }

  // The exit status, or 128 + the signal that ended it.
  int wait() const {
    int status = 0;
    REQUIRE(::waitpid(pid_, &status, 0) == pid_);
    return decoded(status);
  }
  // As wait(), or nothing if it has not ended within `limit`.
  std::optional<int> wait_for(std::chrono::seconds limit) const {
    const auto give_up = std::chrono::steady_clock::now() + limit;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) != pid_) {
      if (std::chrono::steady_clock::now() > give_up) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return decoded(status);
  }
  std::string out() const { return read_text(out_); }
  std::string err() const { return read_text(err_); }

 private:
  fs::path out_;
  fs::path err_;
  pid_t pid_ = 0;

  static int decoded(int status) {
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

// fleetsim running kSmallThenHuge on one thread, every GPU replayed, writing JSON and `h5`.
Fleetsim run_small_then_huge(const TempDir& dir, const fs::path& h5,
                             const std::vector<std::string>& limits) {
  std::vector<std::string> arguments{"run", kSmallThenHuge, "--no-fold", "--threads",
                                     "1",   "--json",       "-o",        h5.string()};
  arguments.insert(arguments.end(), limits.begin(), limits.end());
  return Fleetsim(dir, arguments);
}

// Checks what a run of kSmallThenHuge stopped during its second variant reported: the first
// variant, as a run of it alone reports it, and the stop's reason.
void check_first_variant_kept(const TempDir& dir, const Fleetsim& stopped, const fs::path& h5,
                              const std::string& stopped_by) {
  const auto report = nlohmann::json::parse(stopped.out());
  INFO(stopped.err());
  REQUIRE(report["partial"].is_object());
  CHECK(report["partial"]["stopped_by"].get<std::string>().find(stopped_by) != std::string::npos);
  CHECK(report["partial"]["variants_planned"] == 2);
  REQUIRE(report["variants"].size() == 1);
  CHECK(report["variants"][0]["name"] == "dgx-h100");
  // The line on stderr says what happened.
  CHECK(stopped.err().find("1 of 2 variants that finished are reported, marked partial") !=
        std::string::npos);

  const std::string both = read_text(kSmallThenHuge);
  const fs::path alone = dir.write("alone.yaml", both.substr(0, both.find("\ncompare:")));
  Fleetsim whole(dir, {"run", alone.string(), "--no-fold", "--json"});
  REQUIRE(whole.wait() == 0);
  const auto expected = nlohmann::json::parse(whole.out());
  CHECK(report["variants"][0]["step"] == expected["variants"][0]["step"]);

  const fleetsim::Hdf5Summary file = fleetsim::read_hdf5_summary(h5);
  CHECK(std::get<std::int64_t>(file.attributes.at("partial")) == 1);
  CHECK(std::get<std::string>(file.attributes.at("stopped_by")).find(stopped_by) !=
        std::string::npos);
  CHECK(file.variants.size() == 1);
}

}  // namespace

TEST_CASE("stop: --max-wall and --max-memory stop inside a simulation: what finished is written") {
  for (const auto& [limit, value] : {std::pair{"--max-wall", "5s"}, {"--max-memory", "400MB"}}) {
    INFO(limit);
    const TempDir dir;
    const fs::path h5 = dir.path() / "out.h5";
    const Fleetsim run = run_small_then_huge(dir, h5, {limit, value});
    REQUIRE(run.wait() == 3);
    check_first_variant_kept(dir, run, h5, limit);
  }
}

TEST_CASE("stop: a stop before anything finished writes nothing: the previous result file stays") {
  const TempDir dir;
  const fs::path scenario = dir.write("s.yaml", kHuge);
  const fs::path h5 = dir.write("out.h5", "the previous results");
  Fleetsim run(dir, {"run", scenario.string(), "--no-fold", "-o", h5.string(), "--max-wall", "1s"});
  CHECK(run.wait() == 3);
  CHECK(run.out().empty());
  CHECK(run.err().find("before any of the variants finished: nothing written") !=
        std::string::npos);
  CHECK(read_text(h5) == "the previous results");
  CHECK(dir.file_count() == 4);  // s.yaml, out.h5, out, err: no temporary file left
}

TEST_CASE("stop: Ctrl-C (SIGINT) on a run writes what finished, marked partial, and exits 130") {
  const TempDir dir;
  const fs::path h5 = dir.path() / "out.h5";
  const Fleetsim run = run_small_then_huge(dir, h5, {});
  // The second variant alone grows past 400 MB: signalled then, the first one has finished.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (run.resident_bytes() < 400e6) {
    REQUIRE(std::chrono::steady_clock::now() < give_up);
    REQUIRE_FALSE(run.ended());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  run.signal(SIGINT);
  REQUIRE(run.wait() == 130);
  check_first_variant_kept(dir, run, h5, "SIGINT");
}

TEST_CASE(
    "stop: a fleetsim killed while it writes its HDF5 file leaves the previous file, or none, "
    "and the next run clears what the kill left") {
  // The kill lands as the temporary file appears (inotify), while HDF5 fills it: the target
  // must then be as it was. A kill that comes after the rename (the write took less than the
  // kill's latency) proves nothing, and the attempt is repeated.
  const std::string scenario = std::string(FLEETSIM_TEST_DATA_DIR) + "/large-output.yaml";
  const TempDir dir;
  const fs::path h5 = dir.path() / "result.h5";
  // `restore` puts the target as it was before each attempt; `signal` is the one sent; `before`
  // tells whether it landed before the rename (else the attempt is repeated). Returns the
  // temporary file's path.
  const auto kill_while_writing = [&](const auto& restore, int signal,
                                      const auto& before) -> std::optional<fs::path> {
    for (int attempt = 0; attempt < 10; ++attempt) {
      restore();
      const int watch = inotify_init1(IN_CLOEXEC);
      REQUIRE(watch >= 0);
      REQUIRE(inotify_add_watch(watch, dir.path().c_str(), IN_CREATE) >= 0);
      Fleetsim run(dir, {"run", scenario, "-q", "-o", h5.string()});
      const std::string temp_prefix = h5.filename().string() + ".tmp.";
      std::string temp_name;
      alignas(inotify_event) char buffer[4096];
      while (temp_name.empty()) {
        pollfd ready{watch, POLLIN, 0};
        if (::poll(&ready, 1, 100) == 0) {
          REQUIRE_FALSE(run.ended());  // it ended without beginning its file
          continue;
        }
        const ssize_t length = ::read(watch, buffer, sizeof buffer);
        REQUIRE(length > 0);
        for (ssize_t at = 0; at < length;) {
          const auto* event = reinterpret_cast<const inotify_event*>(buffer + at);
          const std::string name = event->len > 0 ? event->name : "";
          if (name.rfind(temp_prefix, 0) == 0) temp_name = name;
          at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
        }
      }
      run.signal(signal);
      const int status = run.wait();
      ::close(watch);
      const fs::path temp = dir.path() / temp_name;
      if (status == 128 + signal && before(temp)) return temp;
    }
    return std::nullopt;
  };

  // No previous file: none after the kill, only its temporary file, which no handler could
  // remove; the next run that writes there removes it.
  const auto temp_left = [](const fs::path& temp) { return fs::exists(temp); };
  const auto killed = kill_while_writing([&] { fs::remove(h5); }, SIGKILL, temp_left);
  REQUIRE(killed);
  CHECK_FALSE(fs::exists(h5));
  Fleetsim next(dir, {"run", scenario, "-q", "-o", h5.string()});
  REQUIRE(next.wait() == 0);
  CHECK_FALSE(fs::exists(*killed));
  // SIGTERM (as SIGINT) while the file is written ends the process, its temporary file removed.
  const auto no_result = [&](const fs::path&) { return !fs::exists(h5); };
  const auto terminated = kill_while_writing([&] { fs::remove(h5); }, SIGTERM, no_result);
  REQUIRE(terminated);
  CHECK_FALSE(fs::exists(*terminated));

  // A previous file: the same bytes after the kill, and still a whole result.
  Fleetsim first(dir, {"run", scenario, "-q", "-o", h5.string()});
  REQUIRE(first.wait() == 0);
  const std::string previous = read_text(h5);
  const auto killed_over = kill_while_writing(
      [&] { std::ofstream(h5, std::ios::binary) << previous; }, SIGKILL, temp_left);
  REQUIRE(killed_over);
  fs::remove(*killed_over);
  CHECK(read_text(h5) == previous);
  CHECK(fleetsim::read_hdf5_summary(h5).variants.size() == 4);
}

TEST_CASE("an HDF5 file the disk cannot take is an error message, exit 1, and nothing left") {
  // A full disk, as a file-size limit of 8 KB makes it for fleetsim (SIGXFSZ ignored: the
  // write fails with EFBIG, as it would with ENOSPC); the result file is 28 KB.
  const TempDir dir;
  const fs::path h5 = dir.path() / "result.h5";
  const fs::path err = dir.path() / "err";
  const std::string command = "bash -c 'ulimit -f 8; trap \"\" XFSZ; exec " +
                              std::string(FLEETSIM_CLI) + " run " + FLEETSIM_SOURCE_DIR +
                              "/scenarios/h100-vs-b200.yaml -q -o " + h5.string() +
                              "' >/dev/null 2>" + err.string();
  const int status = std::system(command.c_str());
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK_THAT(read_text(err), Catch::Contains("cannot write HDF5 file " + h5.string()));
  CHECK(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()) == 1);
}

TEST_CASE("stop: a plan waiting for another writer stops at --max-wall, writing nothing") {
  // The plan's search takes a tenth of a second (a few under sanitizers), well inside the
  // limit; the other writer holds the directory throughout, so only the limit can end the
  // wait. (Let go after a minute, the plan would write and exit 0: the check fails rather than
  // the test hanging.)
  const TempDir dir;
  const fs::path h5 = dir.path() / "plan.h5";
  const std::string scenario = std::string(FLEETSIM_SOURCE_DIR) + "/scenarios/h100-vs-b200.yaml";
  std::optional<fleetsim::OutputLock> other(std::in_place, std::vector<fs::path>{h5});
  const Fleetsim plan(
      dir, {"plan", scenario, "--top", "3", "-q", "-o", h5.string(), "--max-wall", "5s"});
  const std::optional<int> status = plan.wait_for(std::chrono::seconds(60));
  other.reset();
  if (!status) plan.wait();
  REQUIRE(status);
  CHECK(*status == 3);
  // It had finished its search and was waiting when the limit came.
  CHECK_THAT(plan.err(), Catch::Contains("waiting for another process writing into " +
                                         fs::weakly_canonical(dir.path()).string()));
  CHECK_THAT(plan.err(), Catch::Contains("(--max-wall) was reached: nothing written"));
  CHECK_FALSE(fs::exists(h5));
  CHECK(dir.file_count() == 2);  // out, err: no temporary file left
}

TEST_CASE("two fleetsim processes writing into one directory write one after the other") {
  // While another writer holds the directory, a run waits to write its file (a run of the
  // shipped two-variant scenario takes a few tenths of the 3 s waited here), then writes it.
  const TempDir dir;
  const fs::path h5 = dir.path() / "result.h5";
  const std::string scenario = std::string(FLEETSIM_SOURCE_DIR) + "/scenarios/h100-vs-b200.yaml";
  std::optional<fleetsim::OutputLock> other(std::in_place, std::vector<fs::path>{h5});
  Fleetsim run(dir, {"run", scenario, "-q", "-o", h5.string()});
  std::this_thread::sleep_for(std::chrono::seconds(3));
  CHECK_FALSE(run.ended());
  CHECK_FALSE(fs::exists(h5));
  other.reset();
  CHECK(run.wait() == 0);
  CHECK(fleetsim::read_hdf5_summary(h5).variants.size() == 2);
  // It said what it waited for, so that the pause is not taken for a hang.
  CHECK_THAT(run.err(), Catch::Contains("waiting for another process writing into " +
                                        fs::weakly_canonical(dir.path()).string()));
}
