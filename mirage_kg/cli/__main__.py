from mirage_kg.cli.main import main

main(prog_name="mirage-kg")
