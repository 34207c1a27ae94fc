// shape.cpp: names for --demangle (tests/tracing/shape.rs): a method of a class
// template in a namespace, and a function template.
#define NOIPA __attribute__((noipa))

namespace geo {
template <class T> struct Box {
    T v;
    NOIPA T get(int k) const { return v + k; }
};
} // namespace geo

template <class T> NOIPA T twice(T x) { return x + x; }

int main()
{
    geo::Box<long> b{20};
    return static_cast<int>(twice<long>(b.get(1)) - 42);
}
