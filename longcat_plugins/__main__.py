from longcat_plugins.cli import main

main()
