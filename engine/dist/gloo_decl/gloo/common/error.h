// Declaration-only stand-in for Gloo's header of this name. See Note [Gloo declarations]
// (engine/dist/gloo_backend.cpp): c10d's ProcessGroupGloo.hpp includes it, qtrain uses none of it.
#pragma once
