// PNG plots drawn by gnuplot (Debian's gnuplot-nox), written atomically like every other output.
#pragma once
#include <string>

namespace xl {

// A tool given --plot checks before its work, not after it: 69 when gnuplot is not on PATH, 73 when
// `png` cannot be written where it is named or names a file that is not a PNG.
void check_plot(const std::string& png);

// Draws `png` (width x height): `data` goes to a temp file, and `commands` (gnuplot commands that
// refer to that file as DATA, e.g. "plot DATA index 0 using 1:2") run after the terminal and
// output are set. 69 when gnuplot is missing or fails, 73 when the PNG cannot be written (or an
// existing file there is not a PNG).
void plot_png(const std::string& png, const std::string& data, const std::string& commands, int width = 800,
              int height = 500);

}  // namespace xl
