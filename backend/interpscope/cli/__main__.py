import sys

from interpscope.cli import main

sys.exit(main())
