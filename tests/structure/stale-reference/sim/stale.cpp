// What this does (guide.md §1.2) is fine; guide.md §2 is gone.
int f() { return 0; }
