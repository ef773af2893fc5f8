import sys

from tfaot_dist.cli import main

sys.exit(main())
