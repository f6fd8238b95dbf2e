// Human progress on stderr: a live line redrawn in place when stderr is a terminal (or when
// forced), plain lines otherwise, so logs never fill with carriage returns.
#pragma once
#include <string>

namespace xl {

class Progress {
 public:
  // mode: auto (live only on a terminal), always, never (plain lines only).
  explicit Progress(const std::string& mode);
  ~Progress();
  bool live() const { return live_; }
  // Redraws the live line (no-op when not live).
  void update(const std::string& line);
  // A permanent line (shown unless -q).
  void print(const std::string& line);

 private:
  bool live_;
  size_t shown_ = 0;
  void clear();
};

}  // namespace xl
