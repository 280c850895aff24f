/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The table of features, in the order of FEATURE_LIST (feature-table.h). */
#include "features/feature-table.h"
#include "macro.h"

#define FEATURE_ENTRY(name) &name##_feature,
const FeatureVtable *const feature_table[] = { FEATURE_LIST(FEATURE_ENTRY) };
#undef FEATURE_ENTRY

const size_t feature_table_size = ELEMENTSOF(feature_table);
