from aitp.cli import main

main()
