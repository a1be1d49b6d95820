// A sub-command over 120 lines holding one function over 80.
int long_function() {
  int x = 0;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  x += 1;
  return x;
}
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
// filler
