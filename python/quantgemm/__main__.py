"""`python -m quantgemm` runs the benchmark (quantgemm.bench); `python -m quantgemm --cmake-dir`
prints the directory of quantgemmConfig.cmake (for CMAKE_PREFIX_PATH or quantgemm_DIR)."""

import sys
from pathlib import Path

if sys.argv[1:] == ["--cmake-dir"]:
    config = Path(__file__).resolve().parent / "lib" / "cmake" / "quantgemm"
    if not (config / "quantgemmConfig.cmake").is_file():
        sys.exit(f"quantgemm: no quantgemmConfig.cmake under {config} (an installed wheel has one)")
    print(config)
    sys.exit(0)

from .bench import main  # noqa: E402

sys.exit(main())
