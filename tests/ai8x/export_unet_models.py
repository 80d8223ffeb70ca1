#!/usr/bin/python3
"""Developer tool (not run by ctest/CI): how tests/data/ai8x/models/camvid-ai85unet*.qat.onnx were
made, and the izer check of Kiln's YAML for them.

The UNet factories of ai8x-training (models/ai85net-unet.py) are added at run time to the case
table of the ai8x oracle (tools/ai8x-oracle in the folder named by $KILN_SHARED, not part of the
repository; set it up with its setup.sh) and exported with its export helper (export_models.py,
qat form: QAT policy applied, onnx_export_prep, torch.onnx.export). CamVid_s80_c3 (3x80x80, 4
classes) for ai85unetsmall/medium (no checkpoint: BN folded, random init, seed 0), CamVid_s352_c3
(48x88x88 after the model's fold of 4) for ai85unetlarge with ai8x-synthesis'
trained/ai85-camvid-unet-large.pth.tar; the izer demo of the latter (gen-demos-max78000.sh) runs
with --overlap-data --mlator --no-unload --max-checklines 8192 --new-kernel-loader.

Usage: export_unet_models.py export OUT_DIR
       export_unet_models.py izer YAML NAME [izer_check.py options, e.g. --weights untrained]
"""
import os
import sys

SHARED = os.environ.get('KILN_SHARED', os.path.join(os.path.dirname(__file__), '..', '..', '..', 'shared'))
sys.path.insert(0, os.path.join(SHARED, 'tools', 'ai8x-oracle'))
import oracle_common as oc  # noqa: E402  pylint: disable=wrong-import-position

UNET = [
    dict(name='camvid-ai85unetsmall', golden=None, device=85, file='ai85net-unet.py',
         factory='ai85unetsmall', dim=2, dataset='CamVid_s80_c3', dims=(3, 80, 80), classes=4,
         bias=True, qat='policies/qat_policy_camvid.yaml', train_ckpt=None, izer_ckpt=None,
         izer_flags=[], sample=None),
    dict(name='camvid-ai85unetmedium', golden=None, device=85, file='ai85net-unet.py',
         factory='ai85unetmedium', dim=2, dataset='CamVid_s80_c3', dims=(3, 80, 80), classes=4,
         bias=True, qat='policies/qat_policy_camvid.yaml', train_ckpt=None, izer_ckpt=None,
         izer_flags=[], sample=None),
    dict(name='camvid-ai85unetlarge', golden='camvid-unet-large.yaml', device=85,
         file='ai85net-unet.py', factory='ai85unetlarge', dim=2, dataset='CamVid_s352_c3',
         dims=(48, 88, 88), classes=4, bias=True, qat='policies/qat_policy_camvid.yaml',
         train_ckpt='trained/ai85-camvid-unet-large.pth.tar',
         izer_ckpt='trained/ai85-camvid-unet-large-q.pth.tar',
         izer_flags=['--overlap-data', '--mlator', '--no-unload', '--max-checklines', '8192',
                     '--new-kernel-loader'], sample=None),
]
for case in UNET:
    oc.CASES.append(case)
    oc.BY_NAME[case['name']] = case


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == 'export':
        import export_models as em  # pylint: disable=import-outside-toplevel
        oc.setup_training_imports()
        os.makedirs(sys.argv[2], exist_ok=True)
        for case in UNET:
            print(em.export_one(case, 'qat', sys.argv[2], oc.SYN))
        return 0
    if len(sys.argv) >= 4 and sys.argv[1] == 'izer':
        import izer_check  # pylint: disable=import-outside-toplevel
        sys.argv = ['izer_check.py', '--yaml', sys.argv[2], '--model', sys.argv[3]] + sys.argv[4:]
        return izer_check.main()
    print(__doc__)
    return 2


if __name__ == '__main__':
    sys.exit(main())
