#include "xl/util/gnuplot.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "xl/util/error.h"
#include "xl/util/io.h"

namespace xl {

void plot_png(const std::string& png, const std::string& data, const std::string& commands, int width, int height) {
  io::AtomicOutput out(png, true, true);
  const std::string data_path = out.temp_path() + ".dat", script_path = out.temp_path() + ".gp";
  {
    std::ofstream d(data_path);
    d << data;
    std::ofstream gp(script_path);
    gp << "set terminal pngcairo size " << width << "," << height << " noenhanced\n"
       << "set output '" << out.temp_path() << "'\n"
       << "DATA = '" << data_path << "'\n"
       << commands << "\n";
    XL_CHECK(d.good() && gp.good(), kExitCantCreat, png << ": cannot write the plot's temp files beside it");
  }
  const int rc = std::system(("gnuplot '" + script_path + "' 2>/dev/null").c_str());
  std::remove(data_path.c_str());
  std::remove(script_path.c_str());
  XL_CHECK(rc == 0, kExitUnavailable, "--plot: gnuplot failed or is not installed (apt-get install gnuplot-nox)");
  out.commit();
}

}  // namespace xl
