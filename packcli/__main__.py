from packcli.cli import main

main()
