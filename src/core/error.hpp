// Forwarder: status and error handling live in the bottom layer,
// common/status.hpp, so that backends can use them without including the
// core. Core files may include either; new code should include
// common/status.hpp.
#pragma once

#include "common/status.hpp"
