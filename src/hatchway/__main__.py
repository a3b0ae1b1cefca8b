from hatchway.cli import main

main()
