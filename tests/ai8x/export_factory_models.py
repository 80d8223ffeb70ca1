#!/usr/bin/python3
"""Developer tool (not run by ctest/CI): how the ai8x-training factories of
tests/data/ai8x/models/factories.json were exported, and their entries written.

Each case below is a factory of ai8x-training's models/ with the constructor args, dataset (input
shape from its datasets/*.py 'input'), device and QAT policy of its scripts/train_*.sh (train.py's
default policy policies/qat_policy.yaml where the script names none; a factory without a script
takes its defaults and the dataset its defaults fit, said in `why`). They are exported with the
ai8x oracle's export helper (tools/ai8x-oracle/export_models.py in the folder named by
$KILN_SHARED, not part of the repository; set it up with its setup.sh): qat form, no checkpoint
unless named (BN folded, initiate_qat(policy), seed 0), onnx_export_prep, torch.onnx.export;
exports over 8 MB are not kept (KEEP_LARGE=1 keeps them, for a check outside the test data).

Usage: export_factory_models.py export OUT_DIR [NAME ...]   exports and merges the entries into
                                                           OUT_DIR/factories.json
       export_factory_models.py entry NAME ...              prints/merges the entry only (file kept)
"""
import json
import os
import sys

SHARED = os.environ.get('KILN_SHARED', os.path.join(os.path.dirname(__file__), '..', '..', '..', 'shared'))
sys.path.insert(0, os.path.join(SHARED, 'tools', 'ai8x-oracle'))
import oracle_common as oc  # noqa: E402  pylint: disable=wrong-import-position

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'data', 'ai8x', 'models')
QAT = 'policies/qat_policy.yaml'


def case(name, file, factory, dim, dataset, dims, classes, bias, device=85, qat=QAT, ckpt=None,
         expect='ok', why='', extra=None):
    return dict(name=name, golden=None, device=device, file=file, factory=factory, dim=dim,
                dataset=dataset, dims=dims, classes=classes, bias=bias, qat=qat, train_ckpt=ckpt,
                izer_ckpt=None, izer_flags=[], sample=None, expect=expect, why=why,
                extra=extra or {})


MNIST, CIFAR, KWS = (1, 28, 28), (3, 32, 32), (128, 128, 1)
CASES = [
    # models/ai85net-unet.py: CamVid (scripts/train_camvid_unet.sh: --use-bias, --out-fold-ratio 4,
    # qat_policy_camvid.yaml; the s352 input is folded to 48x88x88 by the data loader).
    case('camvid-ai85unetsmall', 'ai85net-unet.py', 'ai85unetsmall', 2, 'CamVid_s80_c3', (3, 80, 80), 4, True,
         qat='policies/qat_policy_camvid.yaml'),
    case('camvid-ai85unetmedium', 'ai85net-unet.py', 'ai85unetmedium', 2, 'CamVid_s80_c3', (3, 80, 80), 4, True,
         qat='policies/qat_policy_camvid.yaml'),
    case('camvid-ai85unetlarge', 'ai85net-unet.py', 'ai85unetlarge', 2, 'CamVid_s352_c3', (48, 88, 88), 4, True,
         qat='policies/qat_policy_camvid.yaml', ckpt='trained/ai85-camvid-unet-large.pth.tar'),
    # Not here: models/ai84net.py's factories (AI84 generation) take no weight_bits/bias_bits/
    # quantize_activation, which train.py create_model always passes (TypeError); ai85actiontcn's
    # forward calls x.get_device() (CUDA only; -1 on the CPU fails in torch.zeros(device=...));
    # models/ai85nasnet-sequential.py's supernets are ai8x_nas.OnceForAllModule layers without QAT
    # (quantize_clamp(wide, False), float weights): the NAS flow deploys the subnet it extracts as a
    # plain ai8x model (as ai85nascifarnet and ai85kws20netnas are), and ai8x-training has no
    # quantized simulation of the supernet to check against.
    case('mnist-ai85net80wide', 'ai85net-test.py', 'ai85net80wide', 2, 'MNIST', MNIST, 10, False,
         qat='policies/qat_policy_mnist.yaml', expect='ok, AI8X_HOST_TAIL (fc: ai8x.SoftwareLinear)'),
    case('cifar10-ai85squeezenet', 'ai85net-test.py', 'ai85squeezenet', 2, 'CIFAR10', CIFAR, 10, False,
         why='scripts/train_cifar10_squeezenet.sh'),
    case('cifar100-ai85nascifarnet', 'ai85net-nas-cifar.py', 'ai85nascifarnet', 2, 'CIFAR100', CIFAR, 100, True,
         why='scripts/train_cifar100_qat8.sh'),
    # KWS_20: 128 channels x 128 samples, 1-D
    case('kws20-ai85kws20net', 'ai85net-kws20.py', 'ai85kws20net', 1, 'KWS_20', KWS, 21, False,
         why='scripts/train_kws20.sh'),
    case('kws20-ai85kws20netv2', 'ai85net-kws20-v2.py', 'ai85kws20netv2', 1, 'KWS_20', KWS, 21, False,
         why='scripts/train_kws20_v2.sh'),
    case('kws20-ai85kws20netv2batchnorm', 'ai85net-kws20-v2-batchnorm.py', 'ai85kws20netv2batchnorm', 1, 'KWS_20',
         KWS, 21, True, why='no train script; train_kws20_v2.sh args with --use-bias (the factory asserts bias)'),
    case('kws20-ai85kws20netnas', 'ai85net-kws20-nas.py', 'ai85kws20netnas', 1, 'KWS_20', KWS, 21, True,
         qat='policies/qat_policy_late_kws20.yaml', why='scripts/train_kws20_nas.sh'),
    case('kws20-ai85audionet', 'ai85net-audio.py', 'ai85audionet', 1, 'KWS_20', KWS, 21, False,
         why='no train script; its defaults (128 channels x 128) are KWS_20'),
    case('afsk-ai85afsknet', 'ai85net-afsk.py', 'ai85afsknet', 1, 'AFSK', (1, 22, 1), 2, False,
         why='no train script; datasets/afsk.py AFSK (1, 22)'),
    case('faceid112-ai85faceidnet_112', 'ai85net-faceid_112.py', 'ai85faceidnet_112', 3, 'VGGFace2_FaceID',
         (3, 112, 112), 64, True, qat='policies/qat_policy_faceid_112.yaml', why='scripts/train_faceid_112.sh'),
    # object detection (train.py --obj-detection adds the device argument)
    case('svhn-ai85tinierssd', 'ai85net-tinierssd.py', 'ai85tinierssd', 2, 'SVHN_74', (3, 74, 74), 11, True,
         why='scripts/train_svhn_tinierssd.sh', extra={'device': 'cpu'}),
    case('facedet-ai85tinierssdface', 'ai85net-tinierssd-face.py', 'ai85tinierssdface', 2, 'VGGFace2_FaceDetection',
         (3, 224, 168), 2, True, why='scripts/train_facedet_tinierssd.sh', extra={'device': 'cpu'}),
    case('qrcode-ai85tinierssdqr', 'ai85net-tinierssd-kpts-qr.py', 'ai85tinierssdqr', 2, 'qrcode_160_120_kpts_ext',
         (3, 120, 160), 2, True, why='scripts/train_qr_tinierssd.sh', extra={'device': 'cpu'}),
    # MAX78002
    case('pascalvoc-ai87fpndetector', 'ai87-fpndetector.py', 'ai87fpndetector', 2,
         'PascalVOC_2007_2012_256_320_augmented', (3, 256, 320), 21, True, device=87,
         qat='policies/qat_policy_pascalvoc.yaml', why='scripts/train_pascalvoc_fpndetector.sh',
         extra={'device': 'cpu'}),
    case('cifar100-ai87netmobilenetv2cifar100', 'ai87net-mobilenet-v2.py', 'ai87netmobilenetv2cifar100', 2,
         'CIFAR100', CIFAR, 100, True, device=87, qat='policies/qat_policy_cifar100_mobilenetv2.yaml',
         why='no train script; train_cifar100_qat8_mobilenet_v2_0.5.sh args'),
    case('cifar100-ai87effnetv2', 'ai87net-effnetv2.py', 'ai87effnetv2', 2, 'CIFAR100', CIFAR, 100, True,
         device=87, qat='policies/qat_policy_cifar100.yaml', why='scripts/train_cifar100_qat8_effnet2.sh'),
    case('cifar100-ai87mobilenetv2-0.75', 'ai87net-mobilenet-v2.py', 'ai87netmobilenetv2cifar100_m0_75', 2,
         'CIFAR100', CIFAR, 100, True, device=87, qat='policies/qat_policy_cifar100_mobilenetv2.yaml',
         why='scripts/train_cifar100_qat8_mobilenet_v2_0.75.sh'),
    case('faceid112-ai87netmobilefacenet_112', 'ai87net-mobilefacenet_112.py', 'ai87netmobilefacenet_112', 3,
         'VGGFace2_FaceID', (3, 112, 112), 64, True, device=87,
         qat='policies/qat_policy_mobilefacenet_112.yaml', why='scripts/train_mobilefacenet_112.sh'),
    case('imagenet-ai87imageneteffnetv2', 'ai87net-imagenet-effnetv2.py', 'ai87imageneteffnetv2', 2, 'ImageNet',
         (3, 112, 112), 1000, True, device=87, why='scripts/train_imagenet_effnet2.sh'),
]
BY_NAME = {c['name']: c for c in CASES}


def read_policy_name(c):
    """The policy named by the case's train script (policies/*.yaml), checked to exist."""
    if c['qat'] and not os.path.exists(os.path.join(oc.TRN, c['qat'])):
        raise FileNotFoundError(os.path.join(oc.TRN, c['qat']))
    return c['qat']


def entry_of(c, exported=None):
    """The factories.json entry of case c (exported: export_one's entry, or None: file kept)."""
    e = exported or {'bytes': os.path.getsize(os.path.join(DATA, c['name'] + '.qat.onnx')), 'export_seconds': None,
                     'notes': []}
    notes = list(e.get('notes', []))
    if not c['train_ckpt']:
        notes.insert(0, 'exported by qat form without a checkpoint: fuse_bn_layers + initiate_qat(policy), seed 0 '
                        '(tests/ai8x/export_factory_models.py)')
    if c['why']:
        notes.append('args: ' + c['why'])
    return {
        'name': c['name'], 'form': 'qat', 'file': e.get('file', c['name'] + '.qat.onnx'),
        'model_file': 'models/' + c['file'], 'factory': c['factory'],
        'args': {'pretrained': False, 'num_classes': c['classes'], 'num_channels': c['dims'][0],
                 'dimensions': [c['dims'][1], c['dims'][2]], 'bias': c['bias'], 'weight_bits': None,
                 'bias_bits': None, 'quantize_activation': False, **c['extra']},
        'device': {85: 'MAX78000', 87: 'MAX78002'}[c['device']],
        'input_shape': list(oc.input_shape(c)), 'dataset': c['dataset'], 'qat_policy': read_policy_name(c),
        'golden_yaml': None, 'checkpoint': ('ai8x-synthesis/' + c['train_ckpt']) if c['train_ckpt'] else None,
        'bytes': e.get('bytes'), 'export_seconds': e.get('export_seconds'), 'notes': notes, 'expect': c['expect'],
    }


def merge(out_dir, entries):
    path = os.path.join(out_dir, 'factories.json')
    old = json.load(open(path, encoding='utf-8')) if os.path.exists(path) else []
    names = {e['name'] for e in entries}
    new = [e for e in old if e['name'] not in names]
    for e in entries:  # keep an existing entry's expectation (it is set by hand after the check)
        prev = next((o for o in old if o['name'] == e['name']), None)
        if prev and prev.get('expect'):
            e['expect'] = prev['expect']
        new.append(e)
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(new, f, indent=1)
        f.write('\n')


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == 'export':
        import export_models as em  # pylint: disable=import-outside-toplevel
        oc.setup_training_imports()
        plain = oc.create_model

        def create_model(c, trn=None):  # train.py create_model's extra arguments (obj detection: device)
            if not c.get('extra'):
                return plain(c, trn)
            shape = (1, ) + oc.input_shape(c)
            sys.modules['distiller'].utils._validate_input_shape = lambda _a, _b: shape  # pylint: disable=protected-access
            return oc.load_model_factory(c, trn)(
                pretrained=False, num_classes=c['classes'], num_channels=c['dims'][0],
                dimensions=(c['dims'][1], c['dims'][2]), bias=c['bias'], weight_bits=None, bias_bits=None,
                quantize_activation=False, **c['extra'])
        oc.create_model = create_model
        if os.environ.get('KEEP_LARGE'):  # to compile-check exports too large for the test data
            em.MAX_BYTES = 1 << 40
        out = sys.argv[2]
        todo = [BY_NAME[n] for n in sys.argv[3:]] or CASES
        entries = []
        for c in todo:
            oc.CASES.append(c)
            oc.BY_NAME[c['name']] = c
            try:
                e = em.export_one(c, 'qat', out, oc.SYN)
            except Exception as exc:  # pylint: disable=broad-except
                print(f'{c["name"]}: export failed: {type(exc).__name__}: {exc}')
                continue
            if not e['file']:
                print(f'{c["name"]}: {e["notes"][-1]}')
                continue
            print(f'{c["name"]}: {e["bytes"]} bytes')
            entries.append(entry_of(c, e))
        merge(out, entries)
        return 0
    if len(sys.argv) >= 3 and sys.argv[1] == 'entry':
        merge(DATA, [entry_of(BY_NAME[n]) for n in sys.argv[2:]])
        return 0
    print(__doc__)
    return 2


if __name__ == '__main__':
    sys.exit(main())
