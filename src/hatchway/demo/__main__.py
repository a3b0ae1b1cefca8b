import sys

from hatchway.demo.runner import main

sys.exit(main())
