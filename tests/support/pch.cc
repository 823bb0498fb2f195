// The executable that carries the tests' precompiled header (tests/CMakeLists.txt): an executable,
// so that it is compiled with the same flags as the tests that reuse its header (-fPIE).
int main() { return 0; }
