from stepbill.cli import main

main()
