from packcli.cli.app import main

main()
