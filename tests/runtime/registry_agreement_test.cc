// The host-kernel registry is the one source of truth (runtime/host_kernels/registry.h): the
// planner's support check (convplan::CheckSupported, through HostOpSupport::CheckHostNode), its
// error message and the registry's own refusal at run time all give the same answer for every
// registered (op type, element type).
#include <gtest/gtest.h>

#include "compiler/convplan/host_tensor.h"
#include "compiler/convplan/plan.h"
#include "compiler/onnx/loader.h"
#include "device/backends/reference/reference_backend.h"
#include "runtime/host_kernels/registry.h"
#include "tests/support/onnx_model_builder.h"

namespace kiln::runtime {
namespace {

// A one-node model: `op` on input x of ONNX type `type`; loaded without shape inference of the
// output (it may not exist for every type), so the planner sees x's type only.
std::shared_ptr<const onnx_fe::Model> OneNode(const std::string& op, int32_t type) {
  kiln::testing::OnnxModelBuilder b(13);
  b.Input("x", type, {2});
  b.Node(op, {"x"}, {"y"}, "n");
  b.Output("y", type);
  auto m = onnx_fe::LoadModel(b.Serialize());
  return m.ok() ? *m : nullptr;
}

TEST(HostKernelRegistry, PlannerErrorAndRunAgreePerElementType) {
  const HostKernelRegistry& r = HostKernels();
  auto ref = device::MakeReferenceBackend();
  ASSERT_TRUE(ref.ok());
  int checked = 0;
  for (const char* op : {"Relu", "Abs", "Neg", "Sqrt", "Tanh", "Sigmoid", "Transpose"}) {
    ASSERT_NE(r.Find(op), nullptr) << op;
    for (device::DataType d : device::kAllDataTypes) {
      auto model = OneNode(op, static_cast<int32_t>(convplan::OnnxDataType(d)));
      // The ONNX schema does not allow this type for the op (or the loader removed the node).
      if (model == nullptr || model->graph().nodes().empty()) continue;
      const bool listed = r.FindPath(op, d) != nullptr;
      // Planner: the node is refused exactly when the registry does not list the type, and the
      // message names the type.
      const std::string why = r.CheckHostNode(model->graph().nodes()[0], model->graph());
      EXPECT_EQ(why.empty(), listed) << op << " " << device::DataTypeName(d);
      auto plan = convplan::BuildConvPlan(model, r);
      EXPECT_EQ(plan.ok(), listed) << op << " " << device::DataTypeName(d) << ": " << plan.status().ToString();
      if (!listed && !plan.ok()) {
        EXPECT_NE(plan.status().message().find(std::string(op) + " (" + device::DataTypeName(d) + ")"),
                  std::string::npos)
            << plan.status().message();
      }
      // Run time: the registry refuses the same types, naming the types it runs.
      auto x = device::Tensor::Zeros({2}, d);
      ASSERT_TRUE(x.ok());
      auto out = r.Run(model->graph().nodes()[0], {&*x}, HostKernelContext{**ref, nullptr});
      const bool refused = !out.ok() && out.status().message().find("has no host kernel for") != std::string::npos;
      EXPECT_EQ(refused, !listed) << op << " " << device::DataTypeName(d) << ": " << out.status().ToString();
      if (refused) {
        EXPECT_NE(out.status().message().find(HostKernelRegistry::DescribeTypes(*r.Find(op))), std::string::npos);
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
}

}  // namespace
}  // namespace kiln::runtime
