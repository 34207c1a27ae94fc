// tree.cpp: C++ shapes whose call tree is known by construction at -O0
// (every member function, even one defined in its class, is a real call at
// -O0). At -O2 the tests compare call counts with callgrind instead.
//
//   ./tree_cpp basic       classes, virtual calls, a namespace, templates,
//                          operator overloads, constructors/destructors,
//                          std::vector<int>::push_back
//   ./tree_cpp exceptions  an exception thrown two frames down, with a
//                          destructor run during unwinding, caught in main,
//                          followed by ordinary calls
//
// Only printf is used for output (no <iostream>: no static constructors).
// The expected trees are in tests/tracing/cpp.rs; keep both in step.
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace geo {

struct Vec2 {
    int x, y;
    Vec2(int x_, int y_) : x(x_), y(y_) {}
    Vec2 operator+(const Vec2 &o) const { return Vec2(x + o.x, y + o.y); }
    bool operator==(const Vec2 &o) const { return x == o.x && y == o.y; }
};

class Shape {
public:
    explicit Shape(int id) : id_(id) {}
    virtual ~Shape() {}
    virtual int area() const = 0;
    int id() const { return id_; }

protected:
    int id_;
};

class Rect : public Shape {
public:
    Rect(int id, int w, int h) : Shape(id), w_(w), h_(h) {}
    ~Rect() override {}
    int area() const override { return w_ * h_; }

private:
    int w_, h_;
};

class Square : public Rect {
public:
    Square(int id, int side) : Rect(id, side, side) {}
    int area() const override { return Rect::area(); }
};

template <typename T> T twice(T v) { return v + v; }

int total_area(const Shape &a, const Shape &b) { return a.area() + b.area(); }

// For the exception mode.
struct Guard {
    int tag;
    explicit Guard(int t) : tag(t) {}
    ~Guard() { std::printf("cpp: guard %d released\n", tag); }
};

int inner(int x)
{
    if (x > 2)
        throw std::runtime_error("too big");
    return x;
}

int middle(int x)
{
    Guard g(x);
    return inner(x) + 1;
}

} // namespace geo

static int run_basic()
{
    geo::Rect r(1, 2, 3);
    geo::Square s(2, 4);
    int t = geo::total_area(r, s);
    geo::Vec2 a(1, 2), b(3, 4);
    geo::Vec2 c = a + b;
    int d = geo::twice(5);
    geo::Vec2 e = geo::twice(c);
    bool same = e == c;
    std::vector<int> v;
    for (int i = 0; i < 3; i++)
        v.push_back(i * t);
    std::printf("cpp: area=%d c=(%d,%d) d=%d e=(%d,%d) same=%d n=%zu last=%d id=%d\n", t, c.x,
                c.y, d, e.x, e.y, same ? 1 : 0, v.size(), v.back(), s.id());
    return 0;
}

static int run_exceptions()
{
    int got = 0;
    try {
        got = geo::middle(7);
    } catch (const std::runtime_error &err) {
        std::printf("cpp: caught %s\n", err.what());
        got = -1;
    }
    got += geo::inner(1);
    std::printf("cpp: got=%d\n", got);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && std::strcmp(argv[1], "exceptions") == 0)
        return run_exceptions();
    return run_basic();
}
