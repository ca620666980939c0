import sys

from nanlab.cli import main

sys.exit(main())
