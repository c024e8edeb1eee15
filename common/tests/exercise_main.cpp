// The doctest main of the exercises' checks (check_exNN): one line per check, the first failures
// of each in full with the values compared, and the next step at the end.
//
// A starter fails every check that reaches its first TODO, usually all of them, with the same
// message. Doctest's console reporter would print that message once per check; this reporter
// prints it once, counts the following checks that stopped there in one line, and ends with the
// TODO to fill in next and where. A failed comparison shows the values compared beside the
// expression; past the first three failures of a check, only their number. With any command-line argument (a doctest flag such as
// -tc="ex01:scores*" or --help) doctest's own console reporter runs instead, unchanged.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <iostream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "fa/exercise.hpp"

namespace {

// The solution's build of the checks is the executable named exNN_name_solution (fa_add_exercise).
bool& solution_build() {
  static bool is = false;
  return is;
}

class ExerciseReporter : public doctest::IReporter {
 public:
  explicit ExerciseReporter(const doctest::ContextOptions& opt) : out_(*opt.cout) {}

  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_case_start(const doctest::TestCaseData& tc) override {
    name_ = tc.m_name;
    failed_asserts_ = 0;
    todos_in_check_.clear();
    if (folder_.empty()) folder_ = folder_of(tc.m_file.c_str());
    details_.clear();
    fa::last_todo().clear();
    fa::reached_device_todo();  // forget a hole reached outside any check
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}

  void log_assert(const doctest::AssertData& a) override {
    if (!a.m_failed) return;
    // The first few failures of a check in full; past them a count, so that one wrong function
    // does not print a screen of lines that all say the same thing.
    // A TODO reached again in the same check says nothing new: it is not shown again.
    const std::string thrown = a.m_threw ? a.m_exception.c_str() : "";
    const std::string todo = tag_of(thrown);
    if (!todo.empty() && !todos_in_check_.insert(todo).second) return;
    if (++failed_asserts_ > kAssertsShown) return;
    std::ostringstream s;
    s << "        " << file_name(a.m_file) << ":" << a.m_line << "  " << a.m_expr;
    if (!todo.empty() && !thrown_todos_.insert(todo).second)
      s << "  stopped at TODO(" << todo << ")";  // its message was shown above
    else if (a.m_threw)
      s << "  threw: " << thrown;
    s << "\n";
    // What was compared, as values: "-inf == Approx( -199.687 )" beside the expression. A bare
    // true or false (CHECK_MESSAGE(report.ok(), ...)) says nothing: its message follows instead.
    const std::string values = a.m_decomp.c_str();
    if (!a.m_threw && !values.empty() && values != a.m_expr && values != "false" && values != "true")
      s << "          values: " << values << "\n";
    for (int k = 0; k < get_num_active_contexts(); ++k) {
      std::ostringstream context;
      get_active_contexts()[k]->stringify(&context);
      s << indented(context.str());
    }
    details_ += s.str();
  }

  void test_case_exception(const doctest::TestCaseException& e) override {
    details_ += "        threw: " + std::string(e.error_string.c_str()) + "\n";
    for (int k = 0; k < get_num_stringified_contexts(); ++k)
      details_ += indented(get_stringified_contexts()[k].c_str());
  }

  void test_case_end(const doctest::CurrentTestCaseStats& st) override {
    ++checks_;
    // A hole inside a kernel cannot throw: it leaves its message on the device (fa::device_todo),
    // read back here after every check, so that a failed check names it as a host FA_TODO would.
    const std::string device_todo = fa::reached_device_todo();
    if (!st.testCaseSuccess && fa::last_todo().empty() && !device_todo.empty()) {
      fa::last_todo() = device_todo;
      details_ += "        a kernel reached " + device_todo + "\n";
    }
    if (st.testCaseSuccess) {
      ++passed_;
      flush_stopped();
      out_ << "  ok    " << name_ << "\n";
      return;
    }
    const std::string todo = tag_of(fa::last_todo());
    if (first_todo_.empty() && !todo.empty()) first_todo_message_ = fa::last_todo(), first_todo_ = todo;
    if (!todo.empty() && !shown_todos_.insert(todo).second) {
      // Stopped at a TODO already shown: counted, and said once for the whole run of such checks.
      if (todo != stopped_todo_) flush_stopped();
      stopped_todo_ = todo;
      ++stopped_count_;
      return;
    }
    flush_stopped();
    out_ << "  FAIL  " << name_ << "\n" << details_;
    if (failed_asserts_ > kAssertsShown)
      out_ << "        ... and " << failed_asserts_ - kAssertsShown << " more failed comparisons in this check\n";
  }

  void test_run_end(const doctest::TestRunStats&) override {
    flush_stopped();
    out_ << "\n" << passed_ << " of " << checks_ << " checks pass.\n";
    if (checks_ == 0) return;
    if (!first_todo_.empty()) {
      out_ << "next: fill in TODO(" << first_todo_ << "): " << what_of(first_todo_message_) << "\n"
           << "      the code between // >>> " << first_todo_ << " and // <<< " << first_todo_ << " in "
           << folder_ << ", then run this check again.\n";
    } else if (passed_ < checks_) {
      out_ << "next: every TODO this run reached is filled in, but a check fails: under its FAIL line above are\n"
           << "      the comparison, the values your code gave and what they should be; fix the hole and run again.\n";
    } else if (solution_build()) {
      out_ << "next: the solution passes every check. Yours is the starter under " << folder_
           << ": ./course check " << exercise_id(folder_) << "\n";
    } else {
      out_ << "next: compare your code with the same file under " << solutions_of(folder_)
           << ", then read the next chapter.\n";
    }
  }

 private:
  void flush_stopped() {
    if (stopped_count_ == 0) return;
    out_ << "  FAIL  " << (stopped_count_ == 1 ? "the next check stops" : "the next " + std::to_string(stopped_count_) + " checks stop")
         << " at the same TODO (" << stopped_todo_ << ")\n";
    stopped_count_ = 0;
    stopped_todo_.clear();
  }
  static std::string file_name(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }
  static std::string folder_of(const std::string& path) {
    const std::size_t at = path.rfind("/exercises/") != std::string::npos ? path.rfind("/exercises/")
                                                                           : path.rfind("/solutions/");
    const std::string rel = at == std::string::npos ? path : path.substr(at + 1);
    return rel.substr(0, rel.find_last_of('/') + 1);
  }
  static std::string solutions_of(std::string folder) {
    if (folder.rfind("exercises/", 0) == 0) folder.replace(0, 9, "solutions");
    return folder;
  }
  // "exercises/11_decoding/" -> "ex11".
  static std::string exercise_id(const std::string& folder) {
    const std::size_t at = folder.find('/');
    return at == std::string::npos ? std::string("exNN") : "ex" + folder.substr(at + 1, 2);
  }
  // "TODO(ex01:scores) is not done yet: ..." -> "ex01:scores"; "" when the message names none.
  static std::string tag_of(const std::string& message) {
    std::smatch m;
    return std::regex_search(message, m, std::regex(R"(TODO\(([^)]*)\))")) ? m[1].str() : std::string();
  }
  static std::string what_of(const std::string& message) {
    const std::size_t at = message.find("not done yet: ");
    return at == std::string::npos ? message : message.substr(at + 14);
  }
  static std::string indented(const std::string& text) {
    std::string s, line;
    std::istringstream in(text);
    while (std::getline(in, line)) s += "        " + line + "\n";
    return s;
  }

  std::ostream& out_;
  std::string name_, details_, folder_, first_todo_, first_todo_message_;
  std::set<std::string> shown_todos_, thrown_todos_, todos_in_check_;
  std::string stopped_todo_;
  int stopped_count_ = 0;
  int checks_ = 0, passed_ = 0, failed_asserts_ = 0;
  static constexpr int kAssertsShown = 3;
};

REGISTER_REPORTER("exercise", 1, ExerciseReporter);

}  // namespace

namespace fa {

int run_exercise_checks(int argc, char** argv) {
  const std::string exe = argc > 0 ? argv[0] : "";
  solution_build() = exe.size() >= 9 && exe.compare(exe.size() - 9, 9, "_solution") == 0;
  doctest::Context context(argc, argv);
  if (argc <= 1) {
    context.setOption("reporters", "exercise");
    context.setOption("no-version", true);
  }
  return context.run();
}

}  // namespace fa

#ifndef FA_EXERCISE_MAIN_ELSEWHERE
int main(int argc, char** argv) { return fa::run_exercise_checks(argc, argv); }
#endif
