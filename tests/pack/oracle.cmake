# The pack hashes checked against the independent Python oracle
# (tests/pack/hash_oracle.py); included from tests/pack/CMakeLists.txt.
forktrial_add_test(pack_oracle_tests SOURCES oracle_test.cc LIBS forktrial::pack nlohmann_json::nlohmann_json)
