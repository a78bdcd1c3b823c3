fn main() {
    std::process::exit(cronshard_cli::main());
}
