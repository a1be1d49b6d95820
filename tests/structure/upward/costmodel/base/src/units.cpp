// A base file that includes a spec header: one room upward.
#include "partune/costmodel/job.hpp"
