fn main() {
    for l in std::io::stdin().lines() {
        let l = l.unwrap();
        println!("{}", fctrace_symbols::demangle(l.trim()));
    }
}
