// `vpmm plot`: a replay timeline (`vpmm replay --timeline`) as a
// dependency-free SVG chart of mapped, live and requested bytes over op index,
// and, for a PyTorch snapshot, the bytes PyTorch's own allocator reserved.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli.hpp"

namespace vcli {
namespace {

struct Series {
  const char* column;
  const char* label;
  const char* color;
  const char* dash;  // SVG stroke-dasharray, "" for solid
  std::vector<double> y;
};

// A "nice" tick step (1, 2 or 5 x 10^k) giving about `want` intervals.
double nice_step(double range, int want) {
  if (range <= 0) return 1;
  double raw = range / want;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double f = raw / mag;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
}

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// What `vpmm plot` was asked: the timeline, the SVG and, optionally, which
// trace of the timeline.
struct PlotArgs {
  std::string in, out, want_trace;
};

// The command line into *p. Returns 0, or the usage error's status.
int parse_plot_args(int argc, char** argv, PlotArgs* p) {
  ArgCursor a(argc, argv);
  while (a.i < argc) {
    std::string arg = argv[a.i];
    if (arg == "-o") {
      if (a.i + 1 >= argc) return usage_error("-o wants a file");
      p->out = argv[a.i + 1];
      a.i += 2;
      continue;
    }
    if (!a.next_is_option()) {
      if (!p->in.empty()) return usage_error("plot takes one TIMELINE.csv");
      p->in = argv[a.i++];
      continue;
    }
    a.take_option();
    if (!a.take_value()) return usage_error(a.name + " wants a value");
    if (a.name == "--output") p->out = a.value;
    else if (a.name == "--trace") p->want_trace = a.value;
    else return usage_error("unknown plot option '" + a.name + "'");
  }
  if (p->in.empty() || p->out.empty())
    return usage_error("usage: vpmm plot TIMELINE.csv -o OUT.svg [--trace NAME|PATH] (TIMELINE.csv: written by "
                       "`vpmm replay --timeline TIMELINE.csv TRACE...`)");
  // The timeline names a trace by its file name's stem; a path names it too.
  if (!p->want_trace.empty()) p->want_trace = trace_name(p->want_trace);
  return 0;
}

// One trace's rows of a timeline: the op index and a series per column.
struct Timeline {
  std::string trace;          // the trace plotted ("" when the file has no trace column)
  std::vector<double> xs;     // op index of each row
  std::vector<Series> series;
};

std::vector<std::string> split_csv_line(const std::string& l) {
  std::vector<std::string> v;
  std::stringstream ss(l);
  std::string x;
  while (std::getline(ss, x, ',')) v.push_back(x);
  if (!l.empty() && l.back() == ',') v.push_back("");  // an empty last field
  return v;
}

// Reads the rows of one trace (want_trace, else the first) from the timeline
// `in` into *t. Returns false after printing why not.
bool read_timeline(const std::string& in, const std::string& want_trace, Timeline* t) {
  std::ifstream f(in);
  if (!f) {
    std::fprintf(stderr, "vpmm plot: cannot open %s: %s\n", in.c_str(), std::strerror(errno));
    return false;
  }
  std::string line;
  if (!std::getline(f, line)) {
    std::fprintf(stderr, "vpmm plot: %s: empty file\n", in.c_str());
    return false;
  }
  std::vector<std::string> hdr = split_csv_line(line);
  auto col = [&](const std::string& n) {
    for (size_t i = 0; i < hdr.size(); ++i)
      if (hdr[i] == n) return static_cast<int>(i);
    return -1;
  };
  t->series = {
      {"mapped_bytes", "mapped", "#d62728", "", {}},
      {"live_bytes", "live", "#1f77b4", "", {}},
      {"requested_bytes", "requested", "#2ca02c", "6,3", {}},
  };
  const int c_trace = col("trace"), c_op = col("op");
  std::vector<int> cols;
  for (auto& s : t->series) cols.push_back(col(s.column));
  if (c_op < 0 || std::find(cols.begin(), cols.end(), -1) != cols.end()) {
    std::fprintf(stderr, "vpmm plot: %s:1: header lacks op, mapped_bytes, live_bytes or requested_bytes "
                 "(write it with `vpmm replay --timeline`)\n", in.c_str());
    return false;
  }
  // Snapshot replays add PyTorch's reserved bytes (empty for other traces).
  const int c_torch = col("pytorch_reserved_bytes");
  std::vector<double> torch_y;
  bool torch_any = false;
  std::vector<std::string> others;  // other traces in the file, to mention
  t->trace = want_trace;
  int lineno = 1;
  while (std::getline(f, line)) {
    ++lineno;
    if (line.empty()) continue;
    std::vector<std::string> v = split_csv_line(line);
    if (v.size() < hdr.size()) {
      std::fprintf(stderr, "vpmm plot: %s:%d: %zu fields, want %zu\n", in.c_str(), lineno, v.size(), hdr.size());
      return false;
    }
    if (c_trace >= 0) {
      if (t->trace.empty()) t->trace = v[c_trace];
      if (v[c_trace] != t->trace || (!want_trace.empty() && v[c_trace] != want_trace)) {
        if (std::find(others.begin(), others.end(), v[c_trace]) == others.end()) others.push_back(v[c_trace]);
        continue;
      }
    }
    char* end = nullptr;
    t->xs.push_back(std::strtod(v[c_op].c_str(), &end));
    for (size_t k = 0; k < cols.size(); ++k) t->series[k].y.push_back(std::strtod(v[cols[k]].c_str(), &end));
    if (c_torch >= 0) {
      const bool has = !v[c_torch].empty();
      torch_any |= has;
      torch_y.push_back(has ? std::strtod(v[c_torch].c_str(), &end) : 0);
    }
  }
  if (t->xs.empty()) {
    std::string names;
    for (size_t k = 0; k < others.size() && k < 8; ++k) names += (k ? ", " : "") + others[k];
    if (others.size() > 8) names += ", ...";
    std::fprintf(stderr, "vpmm plot: %s: no rows%s%s\n", in.c_str(),
                 want_trace.empty() ? "" : (" for trace " + want_trace).c_str(),
                 names.empty() ? "" : ("; its traces: " + names).c_str());
    return false;
  }
  if (torch_any) t->series.push_back({"pytorch_reserved_bytes", "PyTorch reserved", "#ff7f0e", "2,2", torch_y});
  if (!others.empty() && want_trace.empty())
    std::fprintf(stderr, "vpmm plot: plotting trace %s; the file also has %zu other trace(s), "
                 "e.g. %s (pick one with --trace)\n", t->trace.c_str(), others.size(), others[0].c_str());
  return true;
}

// The chart's geometry: a plot area inside fixed margins, x in ops, y in a
// binary unit that keeps tick labels short, ticks at "nice" steps.
struct Chart {
  static constexpr double W = 960, H = 540, L = 90, R = 30, T = 50, B = 60;
  static constexpr double pw = W - L - R, ph = H - T - B;
  const char* unit = "B";
  double div = 1, ystep = 1, ytop = 1, xstep = 1, xtop = 1;

  explicit Chart(const Timeline& t) {
    static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double xmax = std::max(1.0, *std::max_element(t.xs.begin(), t.xs.end()));
    double ymax = 0;
    for (auto& s : t.series) ymax = std::max(ymax, *std::max_element(s.y.begin(), s.y.end()));
    int u = 0;
    while (u < 4 && ymax / div >= 1024) div *= 1024, ++u;
    unit = units[u];
    ystep = nice_step(std::max(ymax / div, 1.0), 6);
    ytop = std::ceil(std::max(ymax / div, 1.0) / ystep) * ystep;
    xstep = nice_step(xmax, 8);
    xtop = std::ceil(xmax / xstep) * xstep;
  }
  double px(double x) const { return L + x / xtop * pw; }
  double py(double y) const { return T + ph - (y / div) / ytop * ph; }
};

// The title, grid, tick labels, axis titles and axes.
void write_frame(std::ostream& o, const Chart& c, const std::string& title) {
  char b[512];
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  std::snprintf(b, sizeof b,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
                "font-family=\"sans-serif\" font-size=\"12\">\n", Chart::W, Chart::H, Chart::W, Chart::H);
  o << b;
  o << "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << Chart::W / 2 << "\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">vpmm replay: "
    << xml_escape(title) << "</text>\n";
  o << "<g stroke=\"#e0e0e0\" stroke-width=\"1\">\n";
  for (double y = 0; y <= c.ytop + c.ystep / 2; y += c.ystep) {
    std::snprintf(b, sizeof b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", Chart::L, c.py(y * c.div),
                  Chart::L + Chart::pw, c.py(y * c.div));
    o << b;
  }
  for (double x = 0; x <= c.xtop + c.xstep / 2; x += c.xstep) {
    std::snprintf(b, sizeof b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", c.px(x), Chart::T, c.px(x),
                  Chart::T + Chart::ph);
    o << b;
  }
  o << "</g>\n<g fill=\"#333\">\n";
  for (double y = 0; y <= c.ytop + c.ystep / 2; y += c.ystep) {
    std::snprintf(b, sizeof b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", Chart::L - 8,
                  c.py(y * c.div) + 4, y);
    o << b;
  }
  for (double x = 0; x <= c.xtop + c.xstep / 2; x += c.xstep) {
    std::snprintf(b, sizeof b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", c.px(x),
                  Chart::T + Chart::ph + 18, x);
    o << b;
  }
  std::snprintf(b, sizeof b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">op index</text>\n",
                Chart::L + Chart::pw / 2, Chart::H - 14);
  o << b;
  std::snprintf(b, sizeof b,
                "<text x=\"22\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 22 %.1f)\">bytes (%s)</text>\n",
                Chart::T + Chart::ph / 2, Chart::T + Chart::ph / 2, c.unit);
  o << b << "</g>\n";
  std::snprintf(b, sizeof b, "<path d=\"M%.1f %.1f V%.1f H%.1f\" fill=\"none\" stroke=\"#333\" stroke-width=\"1.5\"/>\n",
                Chart::L, Chart::T, Chart::T + Chart::ph, Chart::L + Chart::pw);
  o << b;
}

// A series as a step line (a value holds until the next op), reduced to at
// most a few points per pixel column so huge timelines stay small.
void write_series(std::ostream& o, const Chart& c, const std::vector<double>& xs, const Series& s) {
  char b[64];
  std::string d;
  double last_px = -1, last_y = 0;
  bool have = false;
  for (size_t i = 0; i < xs.size(); ++i) {
    double X = c.px(xs[i]), Y = c.py(s.y[i]);
    if (!have) {
      std::snprintf(b, sizeof b, "M%.1f %.1f", X, Y);
      d += b;
      have = true;
    } else if (std::fabs(Y - last_y) >= 0.05 || i + 1 == xs.size()) {
      if (std::fabs(X - last_px) >= 0.05) {
        std::snprintf(b, sizeof b, "H%.1f", X);
        d += b;
      }
      if (std::fabs(Y - last_y) >= 0.05) {
        std::snprintf(b, sizeof b, "V%.1f", Y);
        d += b;
      }
    } else {
      continue;  // same height: the next change draws the run
    }
    last_px = X;
    last_y = Y;
  }
  o << "<path d=\"" << d << "\" fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"1.6\"";
  if (*s.dash) o << " stroke-dasharray=\"" << s.dash << "\"";
  o << "/>\n";
}

// The legend, with each series' peak.
void write_legend(std::ostream& o, const std::vector<Series>& series) {
  char b[512];
  const double lx = Chart::L + 14, ly = Chart::T + 10, lh = 18;
  std::snprintf(b, sizeof b,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"230\" height=\"%.1f\" fill=\"white\" fill-opacity=\"0.9\" stroke=\"#999\"/>\n",
                lx, ly, lh * series.size() + 10);
  o << b;
  for (size_t k = 0; k < series.size(); ++k) {
    const Series& s = series[k];
    double yy = ly + 14 + lh * k;
    double peak = *std::max_element(s.y.begin(), s.y.end());
    std::snprintf(b, sizeof b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2.5\"%s%s%s/>\n",
                  lx + 8, yy - 4, lx + 36, yy - 4, s.color, *s.dash ? " stroke-dasharray=\"" : "", s.dash,
                  *s.dash ? "\"" : "");
    o << b;
    std::snprintf(b, sizeof b, "<text x=\"%.1f\" y=\"%.1f\">%s (peak %s)</text>\n", lx + 44, yy,
                  s.label, xml_escape(fmt_bytes(static_cast<uint64_t>(peak))).c_str());
    o << b;
  }
}

// The whole chart into `out`. Returns false after printing why not.
bool write_svg(const std::string& out, const std::string& in, const Timeline& t) {
  std::ofstream o(out);
  if (!o) {
    std::fprintf(stderr, "vpmm plot: cannot write %s: %s\n", out.c_str(), std::strerror(errno));
    return false;
  }
  const Chart c(t);
  write_frame(o, c, t.trace.empty() ? in : t.trace);
  for (const Series& s : t.series) write_series(o, c, t.xs, s);
  write_legend(o, t.series);
  o << "</svg>\n";
  o.close();
  if (!o) {
    std::fprintf(stderr, "vpmm plot: writing %s failed\n", out.c_str());
    return false;
  }
  return true;
}

// One line on success, so that the user knows where the chart went and
// what it shows.
void report_written(const std::string& out, const Timeline& t) {
  std::string peaks;
  for (const Series& s : t.series)
    peaks += std::string(peaks.empty() ? "" : ", ") + s.label + " " +
             fmt_bytes(static_cast<uint64_t>(*std::max_element(s.y.begin(), s.y.end())));
  std::printf("vpmm plot: wrote %s (%s%zu ops; peaks: %s)\n", out.c_str(),
              t.trace.empty() ? "" : ("trace " + t.trace + ", ").c_str(), static_cast<size_t>(t.xs.back()),
              peaks.c_str());
}

}  // namespace

int cmd_plot(int argc, char** argv) {
  PlotArgs p;
  if (int rc = parse_plot_args(argc, argv, &p)) return rc;
  Timeline t;
  if (!read_timeline(p.in, p.want_trace, &t)) return 1;
  if (!write_svg(p.out, p.in, t)) return 1;
  report_written(p.out, t);
  return 0;
}


}  // namespace vcli
