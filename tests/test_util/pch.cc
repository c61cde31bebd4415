// The translation unit that builds tests/test_util/pch.h (see there).
