#include "place/place.h" /* transition shim: include place/place.h */
