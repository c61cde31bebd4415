// The translation unit that builds common/pch.h (see there).
