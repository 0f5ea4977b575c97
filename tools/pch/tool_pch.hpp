// The precompiled header of the `vpmm` command (see src/pch/std_pch.hpp:
// used with -Db_pch=true, which scripts/demo.sh and `pip install .` set):
// the standard headers its files include.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>
