// The contract program's entry: runs the tests every file of tests/contract/
// registered (contract.hpp lists the files), or those whose name contains
// argv[1].
#include "check.hpp"

TEST_MAIN()
