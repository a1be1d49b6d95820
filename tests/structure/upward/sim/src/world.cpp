// The simulator including LibTorch and the cli: both refused.
#include <torch/torch.h>
#include "partune/cli/commands.hpp"
