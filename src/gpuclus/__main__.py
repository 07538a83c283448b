import sys

from gpuclus.cli.main import main

sys.exit(main())
